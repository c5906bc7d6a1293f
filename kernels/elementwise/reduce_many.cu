// Σ x² and the non-finite check over one or many tensors per launch (the gradient norm and NaN guard over every
// LoRA tensor: ~350 tensors at 2B, one launch and one host round trip instead of one of each per tensor).
#include "common/device.cuh"
#include "common/multi_tensor.cuh"
#include "elementwise/elementwise.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerLaunch = 96;
struct KInTable {
  KIn x[kPerLaunch];
  int64_t n[kPerLaunch];
};

__global__ void sum_squares_many_kernel(KInTable t, double* acc) {
  __shared__ double scratch[32];
  const int k = blockIdx.y;
  double v = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += int64_t(gridDim.x) * blockDim.x) {
    const double f = ld(t.x[k], i);
    v += f * f;
  }
  v = block_sum(v, scratch);
  if (threadIdx.x == 0 && v != 0) atomicAdd(acc, v);
}

__global__ void any_nonfinite_many_kernel(KInTable t, int32_t* flag) {
  const int k = blockIdx.y;
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += int64_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(ld(t.x[k], i));
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

template <class Kernel, class Out>
cudaError_t launch_many(Kernel kernel, const KIn* xs, const int64_t* ns, int count, Out* out, cudaStream_t s) {
  return launch_in_batches<kPerLaunch, KInTable>(
      count,
      [&](KInTable& t, int j, int i) {
        t.x[j] = xs[i], t.n[j] = ns[i];
        return ns[i];
      },
      [&](const KInTable& t, int k, int64_t most) {
        const int max_blocks = k > 4 ? 256 : 1024;  // one big tensor (the single-tensor forms) gets more blocks
        kernel<<<dim3(grid_for(most, kThreads, max_blocks), static_cast<unsigned>(k)), kThreads, 0, s>>>(t, out);
      });
}

}  // namespace

cudaError_t launch_sum_squares(KIn x, int64_t n, double* acc, cudaStream_t s) {
  return launch_sum_squares_many(&x, &n, 1, acc, s);
}
cudaError_t launch_any_nonfinite(KIn x, int64_t n, int32_t* flag, cudaStream_t s) {
  return launch_any_nonfinite_many(&x, &n, 1, flag, s);
}
cudaError_t launch_sum_squares_many(const KIn* xs, const int64_t* ns, int count, double* acc, cudaStream_t s) {
  return launch_many(sum_squares_many_kernel, xs, ns, count, acc, s);
}
cudaError_t launch_any_nonfinite_many(const KIn* xs, const int64_t* ns, int count, int32_t* flag, cudaStream_t s) {
  return launch_many(any_nonfinite_many_kernel, xs, ns, count, flag, s);
}

}  // namespace deltatune::kernels
