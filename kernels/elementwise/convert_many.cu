// dst[i] (=) src[i] converted to dst[i]'s storage type, for many small tensors per launch (the per-step bf16
// copies of every LoRA factor: ~370 tensors at 2B in two launches instead of one launch each).
// blockIdx.y picks the tensor, blockIdx.x strides over its elements; the table is a kernel parameter.
#include "common/device.cuh"
#include "elementwise/elementwise.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerLaunch = 64;
struct ConvertTable {
  KIn src[kPerLaunch];
  KOut dst[kPerLaunch];
  int64_t n[kPerLaunch];
};

__global__ void convert_many_kernel(ConvertTable t) {
  const int k = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += int64_t(gridDim.x) * blockDim.x)
    st(t.dst[k], i, ld(t.src[k], i));
}

}  // namespace

cudaError_t launch_convert_many(const KOut* dst, const KIn* src, const int64_t* ns, int count, cudaStream_t s) {
  for (int base = 0; base < count; base += kPerLaunch) {
    const int k = count - base < kPerLaunch ? count - base : kPerLaunch;
    ConvertTable t{};
    int64_t most = 1;
    for (int j = 0; j < k; ++j) {
      t.src[j] = src[base + j];
      t.dst[j] = dst[base + j];
      t.n[j] = ns[base + j];
      most = ns[base + j] > most ? ns[base + j] : most;
    }
    convert_many_kernel<<<dim3(grid_for(most, kThreads, 256), static_cast<unsigned>(k)), kThreads, 0, s>>>(t);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace deltatune::kernels
