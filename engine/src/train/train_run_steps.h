// The steps of train_run (train_run.cpp calls them in this order), each on the run's TrainSession.
#pragma once
#include <string>

#include "train/train_run_session.h"

namespace deltatune {

// The experiment database (rank 0 alone, unless the run has none); earlier runs of dead processes are marked.
void open_experiment_store(TrainSession& s);
// --resume: finds the run, claims it atomically and trains its stored config (every worker).
void claim_resumed_run(TrainSession& s);
// A new run refuses an output_dir that holds another run's adapter or checkpoints (rank 0, before anything is
// written): it would replace them, and its first checkpoint would delete that run's later ones.
void check_new_output_dir(TrainSession& s);
// Everything that can be wrong with the inputs fails here, before any training: the base model, the
// starting adapter, the tokenized datasets.
void load_inputs(TrainSession& s);
// The backend, the other workers' agreement on config and data, the model and the adapter on the device.
void start_backend(TrainSession& s);
// Micro-batches per step, this worker's share of them, the number of steps and of warmup steps.
void plan_steps(TrainSession& s);
// A resumed run continues from its newest checkpoint; a new run gets its record. Every worker then starts
// from rank 0's weights and position.
void restore_or_create_run(TrainSession& s);
// Steps until total_steps or a stop, with evaluation, metrics and checkpoints; ends with the PEFT adapter
// and the run's final status. Returns the run id.
std::string train_steps(TrainSession& s);

}  // namespace deltatune
