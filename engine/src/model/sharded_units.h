// Frozen weights split over the ranks of a job, ZeRO-3 / FSDP style: each rank keeps 1/N of every unit's bytes
// (a unit is what one step of the model needs at once: one decoder layer's frozen weights); before a unit is
// used its shards are all-gathered into a full copy, the next unit's gather is started (prefetch), and the full
// copy is freed after use, so at most two gathered units exist at a time (the memory plan's
// `gathered_in_flight`, dist/shard_plan.cpp).
//
// Units are byte buffers (U8 tensors) on the backend; the collective is a ShardGatherer (NCCL on CUDA, host
// connections or threads on the CPU), so the store's logic is tested without GPUs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"

namespace deltatune {

class ShardedUnitStore {
 public:
  ShardedUnitStore(Backend& be, ShardGatherer& gatherer);
  ~ShardedUnitStore();
  ShardedUnitStore(const ShardedUnitStore&) = delete;
  ShardedUnitStore& operator=(const ShardedUnitStore&) = delete;

  // Adds a unit from its full bytes (a tensor on the backend, any dtype; read as bytes) and keeps only this
  // rank's shard (the last rank's zero-padded). Every rank must add units of the same sizes in the same order.
  // Returns the unit's index.
  size_t add(const Tensor& full);

  // The full bytes of `unit` (U8 [unit_bytes] on the backend), gathered now or taken from the prefetch; then
  // `prefetch` (another unit: the next in forward or backward order) starts gathering, so it is ready when asked
  // for. Valid until release; the compute work enqueued after acquire sees the bytes.
  const Tensor& acquire(size_t unit, std::optional<size_t> prefetch = std::nullopt);
  // Frees the gathered copy of `unit` (nothing when it is not held); call after enqueuing the work that reads it.
  void release(size_t unit);

  int rank() const { return g_.rank(); }
  int world() const { return g_.world(); }
  size_t units() const { return sizes_.size(); }
  size_t unit_bytes(size_t unit) const { return sizes_.at(unit); }
  size_t resident_bytes() const;  // the shards this rank keeps
  size_t gathered_now() const;    // full copies held now
  size_t gathered_peak() const { return peak_; }
  size_t gathers() const { return gathers_; }  // collectives run

 private:
  struct Gathered {
    Tensor full;      // U8 [world * shard bytes], viewed as [unit bytes] once ready
    uint64_t ticket = 0;
    bool waited = false;
  };
  void start(size_t unit);
  void check_unit(size_t unit) const;

  Backend& be_;
  ShardGatherer& g_;
  std::vector<size_t> sizes_, shard_bytes_;
  std::vector<Tensor> shards_;
  std::vector<std::optional<Gathered>> full_;
  size_t peak_ = 0, gathers_ = 0;
};

}  // namespace deltatune
