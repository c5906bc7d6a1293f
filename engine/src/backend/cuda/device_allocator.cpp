#include "backend/cuda/device_allocator.h"

#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace deltatune::cuda {

namespace {
constexpr size_t kSmall = size_t(1) << 20;  // below: 512-byte granules; above: 2 MiB granules
std::string mib(int64_t b) { return std::to_string(b / (1 << 20)) + " MiB"; }
}  // namespace

DeviceAllocator::DeviceAllocator(int device) : device_(device) {
  size_t free_b = 0, total_b = 0;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  total_ = static_cast<int64_t>(total_b);
}

DeviceAllocator::~DeviceAllocator() {
  cudaSetDevice(device_);
  for (auto& [size, p] : free_) cudaFree(p);
}

size_t DeviceAllocator::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kSmall) return (bytes + 511) / 512 * 512;
  const size_t g = size_t(2) << 20;
  return (bytes + g - 1) / g * g;
}

bool DeviceAllocator::fits(size_t have, size_t want) {
  return want < kSmall ? have <= 2 * want : have <= want + want / 8;
}

void* DeviceAllocator::take(size_t size, size_t* got) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(size);
    // Reuse a cached block unless it wastes too much (small: up to 2x; large: up to 1/8 more).
    if (it != free_.end() && fits(it->first, size)) {
      *got = it->first;
      void* p = it->second;
      free_.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cache();
    e = cudaMalloc(&p, size);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    const MemoryStats s = stats();
    throw Error("CUDA out of memory on cuda:" + std::to_string(device_) + " allocating " + mib(int64_t(size)) +
                " (in use " + mib(s.allocated_bytes) + ", reserved " + mib(s.reserved_bytes) + ", device total " +
                mib(s.total_bytes) + "): " + oom_advice());
  }
  cuda_check(e, "cudaMalloc");
  *got = size;
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ += int64_t(size);
  return p;
}

void DeviceAllocator::put_back(void* p, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(size, p);
}

void DeviceAllocator::count_use(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  allocated_ += bytes;
  if (allocated_ > peak_) peak_ = allocated_;
}

std::shared_ptr<void> DeviceAllocator::allocate(size_t bytes) {
  size_t got = 0;
  void* p = take(round_size(bytes), &got);
  count_use(int64_t(got));
  std::shared_ptr<DeviceAllocator> self = shared_from_this();
  return std::shared_ptr<void>(p, [self, got](void* q) { self->give_back(q, got); });
}

void DeviceAllocator::give_back(void* p, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  allocated_ -= int64_t(size);
  free_.emplace(size, p);
}

void DeviceAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  for (auto& [size, p] : free_) {
    cudaFree(p);
    reserved_ -= int64_t(size);
  }
  free_.clear();
}

std::shared_ptr<void> DevicePool::allocate(size_t bytes) {
  const size_t size = DeviceAllocator::round_size(bytes);
  void* p = nullptr;
  size_t got = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && DeviceAllocator::fits(it->first, size)) {
      got = it->first;
      p = it->second;
      free_.erase(it);
    }
  }
  if (!p) {
    p = from_->take(size, &got);
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace_back(p, got);
  }
  from_->count_use(int64_t(got));
  std::shared_ptr<DevicePool> self = shared_from_this();
  return std::shared_ptr<void>(p, [self, got](void* q) {
    self->from_->count_use(-int64_t(got));
    std::lock_guard<std::mutex> lock(self->mu_);
    self->free_.emplace(got, q);
  });
}

DevicePool::~DevicePool() {
  for (const auto& [p, size] : blocks_) from_->put_back(p, size);
}

MemoryStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s;
  s.allocated_bytes = allocated_;
  s.reserved_bytes = reserved_;
  s.peak_allocated_bytes = peak_;
  s.total_bytes = total_;
  return s;
}

}  // namespace deltatune::cuda
