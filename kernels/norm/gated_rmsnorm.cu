// Gated RMSNorm of the GDN output (spec §3.3, §3.10), rows of length n = dv, one block per row, fp32 math.
//   forward:  r = 1/sqrt(mean(x²) + eps), x̂ = x·r;  y (=) x̂·w·silu(z);  rstd (=) r
//   backward: dz (=) dy·x̂·w·silu'(z);  dx̂ = dy·silu(z)·w;  dx (=) r·(dx̂ − x̂·mean(dx̂·x̂))
// (The whole product is formed in fp32 before one cast, as FLA's fused kernel does.)
#include "common/device.cuh"
#include "norm/norm.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void gated_rmsnorm_fwd_kernel(KIn x, KIn z, KIn w, float eps, KOut y, float* rstd, int64_t n) {
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
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    st(y, base + c, ld(x, base + c) * r * ld(w, c) * siluf_(ld(z, base + c)));
}

__global__ void gated_rmsnorm_bwd_kernel(KIn dy, KIn x, KIn z, KIn w, const float* rstd, KOut dx, KOut dz,
                                         int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xh = ld(x, base + c) * r, zv = ld(z, base + c), g = ld(dy, base + c), wv = ld(w, c);
    dot += g * siluf_(zv) * wv * xh;
    st(dz, base + c, g * xh * wv * dsiluf_(zv));
  }
  const float mean = block_sum(dot, scratch) / float(n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xh = ld(x, base + c) * r;
    const float dxh = ld(dy, base + c) * siluf_(ld(z, base + c)) * ld(w, c);
    st(dx, base + c, r * (dxh - xh * mean));
  }
}

}  // namespace

cudaError_t launch_gated_rmsnorm_fwd(KIn x, KIn z, KIn w, float eps, KOut y, float* rstd, int64_t rows, int64_t n,
                                     cudaStream_t s) {
  if (rows > 0) gated_rmsnorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, z, w, eps, y, rstd, n);
  return cudaGetLastError();
}
cudaError_t launch_gated_rmsnorm_bwd(KIn dy, KIn x, KIn z, KIn w, const float* rstd, KOut dx, KOut dz, int64_t rows,
                                     int64_t n, cudaStream_t s) {
  if (rows > 0)
    gated_rmsnorm_bwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, z, w, rstd, dx, dz, n);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
