// dst[i] (=) src[i] converted to dst[i]'s storage type, for many small tensors per launch (the per-step bf16
// copies of every LoRA factor: ~370 tensors at 2B in two launches instead of one launch each).
#include "common/device.cuh"
#include "common/multi_tensor.cuh"
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
  return launch_in_batches<kPerLaunch, ConvertTable>(
      count,
      [&](ConvertTable& t, int j, int i) {
        t.src[j] = src[i], t.dst[j] = dst[i], t.n[j] = ns[i];
        return ns[i];
      },
      [&](const ConvertTable& t, int k, int64_t most) {
        convert_many_kernel<<<dim3(grid_for(most, kThreads, 256), static_cast<unsigned>(k)), kThreads, 0, s>>>(t);
      });
}

}  // namespace deltatune::kernels
