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

 private:
  void give_back(void* p, size_t size);
  static size_t round_size(size_t bytes);

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // cached blocks by size
  int64_t allocated_ = 0, reserved_ = 0, peak_ = 0, total_ = 0;
};

}  // namespace deltatune::cuda
