// Which micro-batches of an optimizer step each data-parallel worker trains. Every worker builds the same
// global stream of micro-batches (same data, seed and epochs); a step takes the next `global` of them
// exactly as a one-GPU run with gradient_accumulation_steps = global does, and worker r trains those at
// positions r, r + world, r + 2·world, ... (strided: consecutive, similar-sized batches spread over the
// workers). The gradients, each scaled by 1 / (targets of the whole step), are summed over the workers, so the
// update is that of the one-GPU run up to the order of fp32 additions.
#pragma once
#include <cstdint>
#include <vector>

namespace deltatune {

// Positions (0 <= p < global) within a step's micro-batches that `rank` trains, ascending.
std::vector<int64_t> shard_positions(int64_t global, int rank, int world);

// Micro-batches per worker for a step of `global` micro-batches over `world` workers. Throws Error (naming
// both numbers and what to do) when they do not divide: the global batch must stay what it was.
int64_t per_worker_accumulation(int64_t global, int world);

// Micro-batches per optimizer step of a run: its gradient_accumulation_steps times its workers, or, on a
// resume, what the checkpoint recorded (so the global batch and the data order stay those of the run).
int64_t global_micro_batches(int64_t gradient_accumulation_steps, int world, int64_t from_checkpoint);

}  // namespace deltatune
