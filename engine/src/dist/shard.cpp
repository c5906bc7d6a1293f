#include "dist/shard.h"

#include <string>

#include "core/error.h"

namespace deltatune {

std::vector<int64_t> shard_positions(int64_t global, int rank, int world) {
  check(world >= 1 && rank >= 0 && rank < world, "internal: shard_positions: rank " + std::to_string(rank) +
                                                     " of world " + std::to_string(world));
  std::vector<int64_t> out;
  for (int64_t p = rank; p < global; p += world) out.push_back(p);
  return out;
}

int64_t per_worker_accumulation(int64_t global, int world) {
  check(global >= 1 && world >= 1 && global % world == 0,
        "a step of this run trains " + std::to_string(global) + " micro-batches, which " + std::to_string(world) +
            " GPUs cannot share evenly; the global batch must stay the same (it sets the learning curve): use a "
            "number of GPUs that divides " + std::to_string(global));
  return global / world;
}

int64_t global_micro_batches(int64_t gradient_accumulation_steps, int world, int64_t from_checkpoint) {
  if (from_checkpoint > 0) return from_checkpoint;
  const int64_t a = gradient_accumulation_steps < 1 ? 1 : gradient_accumulation_steps;
  return a * world;
}

}  // namespace deltatune
