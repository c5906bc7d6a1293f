// RMSNorm over rows of length n (spec §3.3, §3.10), one block per row, fp32 math.
//   forward:  r = 1/sqrt(mean(x²) + eps);  y (=) x·r·w'   with w' = 1 + w (zero-centred) or w;  rstd (=) r
//   backward: x̂ = x·r, dx̂ = dy·w';  dx (=) r·(dx̂ − x̂·mean(dx̂·x̂))
// Memory: each row is read twice (reduction pass, then output pass); rows are contiguous.
#include "common/device.cuh"
#include "norm/norm.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void rmsnorm_fwd_kernel(KIn x, KIn w, float eps, bool zc, KOut y, float* rstd, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = rsqrtf(ss / float(n) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    st(y, base + c, ld(x, base + c) * r * wv);
  }
}

__global__ void rmsnorm_bwd_kernel(KIn dy, KIn x, KIn w, const float* rstd, bool zc, KOut dx, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    dot += ld(dy, base + c) * wv * ld(x, base + c) * r;
  }
  const float mean = block_sum(dot, scratch) / float(n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    const float xh = ld(x, base + c) * r;
    st(dx, base + c, r * (ld(dy, base + c) * wv - xh * mean));
  }
}

}  // namespace

cudaError_t launch_rmsnorm_fwd(KIn x, KIn w, float eps, bool zc, KOut y, float* rstd, int64_t rows, int64_t n,
                               cudaStream_t s) {
  if (rows > 0) rmsnorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, w, eps, zc, y, rstd, n);
  return cudaGetLastError();
}
cudaError_t launch_rmsnorm_bwd(KIn dy, KIn x, KIn w, const float* rstd, bool zc, KOut dx, int64_t rows, int64_t n,
                               cudaStream_t s) {
  if (rows > 0) rmsnorm_bwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, w, rstd, zc, dx, n);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
