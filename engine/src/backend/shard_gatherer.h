// All-gather of frozen-weight shards over the ranks of a job (engine/src/model/sharded_units.h keeps 1/N of
// every unit per rank and gathers a full copy right before it is used). NCCL's all-gather on the CUDA backend
// (on a stream of its own, so the next layer's gather runs while this layer computes), the host connections
// for CPU workers, threads for in-process tests (dist/sharded_weights.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace deltatune {

class ShardGatherer {
 public:
  virtual ~ShardGatherer() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Starts the gather: `full` (world * shard_bytes, on the backend's device) receives every rank's `shard` in
  // rank order, ordered after the compute work enqueued so far (so `full` may be memory that work just freed).
  // Returns a ticket for ready(). A collective: every rank makes the same calls in the same order.
  virtual uint64_t start_all_gather(const void* shard, void* full, size_t shard_bytes) = 0;
  // The compute work enqueued after this call sees the result of the gather `ticket`.
  virtual void ready(uint64_t ticket) = 0;
  // Ends the communicator at once (a peer failed). Never throws.
  virtual void abort() noexcept {}
};

}  // namespace deltatune
