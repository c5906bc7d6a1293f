// Caching device allocator: blocks freed by tensors go back to a size-keyed cache and are reused by later
// allocations on the backend's single stream (stream order makes the reuse safe), so a training step
// reaches steady state without cudaMalloc/cudaFree. On cudaMalloc failure the cache is released and the
// allocation retried once; then an Error with advice is thrown.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace deltatune::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  explicit DeviceAllocator(int device);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Storage for `bytes` bytes (at least 256-byte aligned); the block returns to the cache when the last
  // owner drops it. Must be called on a shared_ptr-owned allocator.
  std::shared_ptr<void> allocate(size_t bytes);
  MemoryStats stats() const;
  // cudaFree every cached (unused) block.
  void release_cache();
  // A block of `size` (rounded) bytes for a pool: reserved here but counted as allocated only through
  // count_use (a pool's idle blocks count as this allocator's cache does); give it back with put_back.
  void* take(size_t size, size_t* got);
  void put_back(void* p, size_t size);
  void count_use(int64_t bytes);
  // The block size an allocation of `bytes` takes.
  static size_t round_size(size_t bytes);
  // Whether a cached block of `have` bytes may serve a request of `want` (rounded) bytes.
  static bool fits(size_t have, size_t want);

 private:
  void give_back(void* p, size_t size);

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // cached blocks by size
  int64_t allocated_ = 0, reserved_ = 0, peak_ = 0, total_ = 0;
};

// The memory of a recorded training step (a CUDA graph): blocks taken from the allocator (they stay allocated
// there) and kept for the recording's lifetime. Tensors allocated while recording come from here and go back
// here, so the step reuses its blocks in stream order as an op-by-op run does (the same peak), and nothing
// outside the recording is ever handed a block the graph writes.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  explicit DevicePool(std::shared_ptr<DeviceAllocator> from) : from_(std::move(from)) {}
  // Must be called on a shared_ptr-owned pool.
  std::shared_ptr<void> allocate(size_t bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

 private:
  std::shared_ptr<DeviceAllocator> from_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::vector<std::pair<void*, size_t>> blocks_;  // every block taken from `from_`
};

}  // namespace deltatune::cuda
