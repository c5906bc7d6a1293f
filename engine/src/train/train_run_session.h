// What one train_run holds while it runs. The steps of train_run (train_run_steps.h) fill it in, in order;
// each field says which step sets it.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data/pipeline.h"
#include "deltatune/experiment_store.h"
#include "deltatune/trainer.h"
#include "dist/data_parallel.h"
#include "lora/lora.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/batch_stream.h"
#include "train/sample_prompts.h"
#include "data/image_rows.h"

namespace deltatune {

// Gives a claimed (resumed) run back with its previous status unless training started: a resume that
// cannot start leaves the run resumable once the cause is fixed.
struct ReleaseUnlessStarted {
  ExperimentStore* store = nullptr;
  const RunRecord* before = nullptr;
  bool started = false;
  ~ReleaseUnlessStarted();
};

struct TrainSession {
  using Clock = std::chrono::steady_clock;

  TrainSession(const RunConfig& cfg, RunObserver& obs, RunControl& control, const TrainOptions& topts,
               DataParallel* dp);
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // The caller's.
  RunConfig cfg;  // a resume replaces it with the resumed run's config
  RunObserver& obs;
  RunControl& control;
  const TrainOptions& topts;
  DataParallel* dp;  // null without data parallelism
  const bool root;   // the worker that writes the database, checkpoints and adapter
  const int world;
  const bool resuming;

  // open_experiment_store, claim_resumed_run
  std::unique_ptr<ExperimentStore> store;
  std::optional<RunRecord> resumed;
  ReleaseUnlessStarted release_guard;

  // load_inputs
  ModelWeights weights;
  LoraAdapter adapter;
  PreparedData data;
  std::string data_fp;       // data_fingerprint of the training examples, kept in every checkpoint
  std::string class_prefix;  // the PEFT key prefix the adapters are written with
  SamplePrompts samples;     // the config's sample_prompts, tokenised (rank 0 generates them)

  // start_backend
  std::unique_ptr<Backend> be;
  std::string device;  // the backend's name, or every worker's GPU with data parallelism
  std::unique_ptr<Qwen35Model> model;
  // A vision-language checkpoint's image settings when the training or validation data has images (each
  // micro-batch's pixels are read just before its step); none otherwise.
  std::optional<VisionDataConfig> vision;
  // Checkpointing and loss chunk of every training step: the config's, or with `gradient_checkpointing: auto`
  // the memory plan for this GPU (made before the weights are uploaded).
  bool checkpointing = false;
  int64_t checkpoint_layers = -1;
  int64_t loss_chunk_rows = 1024;

  // plan_steps
  std::optional<std::string> ckpt;  // the checkpoint a resume continues from
  int64_t ckpt_global = 0;          // micro-batches per step of that checkpoint's run (0: not recorded)
  int64_t global = 1;               // micro-batches per optimizer step over all workers
  std::vector<int64_t> mine;        // this worker's positions among them
  int64_t total_steps = 0, warmup = 0;

  // restore_or_create_run, then train_steps
  std::string run_id;
  int64_t step = 0;
  DataCursor cursor;
  int64_t tokens_seen = 0;
  double wall_offset = 0;  // seconds trained before a resume
  Clock::time_point t_start;
  double last_loss = -1, best_eval = -1;

  const ModelConfig& model_config() const { return weights.config; }
  void log(LogLevel level, const std::string& message);
  // Logged and, once the run has a record, kept among its events.
  void event(LogLevel level, const std::string& message);
  void set_status(const std::string& status);
  // A resume that fails says why in the resumed run's events.
  void note_resume_failure(const std::string& why);
};

}  // namespace deltatune
