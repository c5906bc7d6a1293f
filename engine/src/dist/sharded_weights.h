// Frozen weights split over the ranks of a job, ZeRO-3 / FSDP style: each rank keeps 1/N of every unit's bytes
// (a unit is what one step of the model needs at once: the embedding, one decoder layer, the head); before a
// unit is used, its shards are all-gathered into a full copy, the next unit's gather is started (prefetch), and
// the full copy is freed after use, so at most two gathered units exist at a time (the memory plan's
// `gathered_in_flight`, dist/shard_plan.cpp).
//
// The collective is an interface: NCCL's all-gather on CUDA, InProcessShardGroup for CPU tests (threads as
// ranks), so the store's logic is tested without GPUs.
#pragma once
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace deltatune {

class ShardGatherer {
 public:
  virtual ~ShardGatherer() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Every rank calls it with a shard of `shard_bytes`; `full` (world * shard_bytes) receives the shards in
  // rank order. A collective: all ranks make the same calls in the same order.
  virtual void all_gather(const uint8_t* shard, uint8_t* full, size_t shard_bytes) = 0;
};

// The ranks of one process (threads), for tests: rank(r) is the gatherer thread r uses.
class InProcessShardGroup {
 public:
  explicit InProcessShardGroup(int world);
  ~InProcessShardGroup();
  ShardGatherer& rank(int r);

 private:
  class Rank;
  std::vector<const uint8_t*> slots_;
  std::barrier<> barrier_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

class ShardedUnitStore {
 public:
  // `units`: every unit's full bytes; only this rank's shard of each is kept (units padded to a multiple of the
  // world size). Every rank must pass units of the same sizes.
  ShardedUnitStore(const std::vector<std::vector<uint8_t>>& units, ShardGatherer& gatherer);

  // The full bytes of `unit`, gathered now or taken from the prefetch; then `prefetch` (another unit, e.g. the
  // next in forward or backward order) is gathered too, so it is ready when asked for. Valid until release.
  const std::vector<uint8_t>& acquire(size_t unit, std::optional<size_t> prefetch = std::nullopt);
  // Frees the gathered copy of `unit` (nothing when it is not held).
  void release(size_t unit);

  size_t units() const { return sizes_.size(); }
  size_t unit_bytes(size_t unit) const { return sizes_[unit]; }
  size_t resident_bytes() const;  // the shards this rank keeps
  size_t gathered_now() const;    // full copies held now
  size_t gathered_peak() const { return peak_; }
  size_t gathers() const { return gathers_; }  // collectives run

 private:
  void gather(size_t unit);

  ShardGatherer& g_;
  std::vector<size_t> sizes_, shard_bytes_;
  std::vector<std::vector<uint8_t>> shards_;
  std::vector<std::optional<std::vector<uint8_t>>> full_;
  size_t peak_ = 0, gathers_ = 0;
};

}  // namespace deltatune
