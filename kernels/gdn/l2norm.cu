// L2 normalisation of q and k per head (spec §3.4 step 7, §3.10), one block per row of length n = dk:
//   forward:  ρ = 1/sqrt(Σx² + eps);  y (=) scale·x·ρ (F32);  rstd (=) ρ
//   backward (with the GVA sum of spec §4.3 step 7): dŷ = scale·Σ_{value heads of the group} dyh,
//             x̂ = x·ρ;  dx (=) ρ·(dŷ − x̂·Σ(dŷ⊙x̂))
#include "common/device.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void l2norm_fwd_kernel(KIn x, float scale, float eps, float* y, float* rstd, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss, scratch) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) y[base + c] = scale * ld(x, base + c) * r;
}

// One block per (t, key head).
__global__ void l2norm_bwd_gva_kernel(const float* dyh, KIn x, const float* rstd, float scale, KOut dx, int64_t HK,
                                      int64_t HV, int64_t n) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;  // t·HK + j
  const int64_t t = row / HK, j = row % HK;
  const int64_t r = HV / HK;
  const float rho = rstd[row];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float d = 0.f;
    for (int64_t m = 0; m < r; ++m) d += dyh[((t * HV) + j * r + m) * n + c];
    dot += scale * d * ld(x, row * n + c) * rho;
  }
  dot = block_sum(dot, scratch);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float d = 0.f;
    for (int64_t m = 0; m < r; ++m) d += dyh[((t * HV) + j * r + m) * n + c];
    st(dx, row * n + c, rho * (scale * d - ld(x, row * n + c) * rho * dot));
  }
}

}  // namespace

cudaError_t launch_l2norm_fwd(KIn x, float scale, float eps, float* y, float* rstd, int64_t rows, int64_t n,
                              cudaStream_t s) {
  if (rows > 0) l2norm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, scale, eps, y, rstd, n);
  return cudaGetLastError();
}
cudaError_t launch_l2norm_bwd_gva(const float* dyh, KIn x, const float* rstd, float scale, KOut dx, int64_t T,
                                  int64_t HK, int64_t HV, int64_t n, cudaStream_t s) {
  if (T * HK > 0)
    l2norm_bwd_gva_kernel<<<static_cast<unsigned>(T * HK), kThreads, 0, s>>>(dyh, x, rstd, scale, dx, HK, HV, n);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
