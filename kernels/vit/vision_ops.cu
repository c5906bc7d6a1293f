// The vision tower's ops, fp32 math in registers (any storage type through KIn/KOut):
//   layer_norm: mean, r = 1/sqrt(var + eps); y (=) (x − mean)·r·w + b; one block per row, the row read twice
//     (statistics, then output; the two-pass variance as PyTorch's, not E[x²] − mean²)
//     backward: x̂ = (x − mean)·r, g = dy·w; dx (=) r·(g − mean(g) − x̂·mean(g·x̂))
//   gelu: tanh form 0.5·x·(1 + tanh(c·(x + 0.044715·x³))), c = sqrt(2/π); exact 0.5·x·(1 + erf(x/√2))
//   rope_2d: NeoX rotate-half over the whole head; slot i < hd/2 turns by pos_row·f_i (i < hd/4) or
//     pos_col·f_(i − hd/4), f_j = 1/θ^(2j/(hd/2)) in fp32 as HF builds inv_freq
// Memory: grid-stride elementwise loops; one thread per rotated pair.
#include "common/device.cuh"
#include "rope/rotate_half.cuh"
#include "vit/vision_ops.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void layer_norm_fwd_kernel(KIn x, KIn w, KIn b, float eps, KOut y, float* mean, float* rstd, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += ld(x, base + c);
  const float mu = block_sum(s, scratch) / float(n);
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = ld(x, base + c) - mu;
    ss += d * d;
  }
  const float r = rsqrtf(block_sum(ss, scratch) / float(n) + eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) st(y, base + c, (ld(x, base + c) - mu) * r * ld(w, c) + ld(b, c));
}

__global__ void layer_norm_bwd_kernel(KIn dy, KIn x, KIn w, const float* mean, const float* rstd, KOut dx, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float g = ld(dy, base + c) * ld(w, c);
    sg += g;
    sgx += g * (ld(x, base + c) - mu) * r;
  }
  const float mg = block_sum(sg, scratch) / float(n);
  const float mgx = block_sum(sgx, scratch) / float(n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float g = ld(dy, base + c) * ld(w, c), xh = (ld(x, base + c) - mu) * r;
    st(dx, base + c, r * (g - mg - xh * mgx));
  }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ __forceinline__ float gelu_(float v, bool tanh_approx) {
  if (tanh_approx) return 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  return 0.5f * v * (1.f + erff(v * kInvSqrt2));
}
__device__ __forceinline__ float dgelu_(float v, bool tanh_approx) {
  if (tanh_approx) {
    const float t = tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v));
    return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * 0.044715f * v * v);
  }
  return 0.5f * (1.f + erff(v * kInvSqrt2)) + v * expf(-0.5f * v * v) * kInvSqrt2Pi;
}

__global__ void gelu_fwd_kernel(KIn x, bool tanh_approx, KOut y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(y, i, gelu_(ld(x, i), tanh_approx));
}
__global__ void gelu_bwd_kernel(KIn dy, KIn x, bool tanh_approx, KOut dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(dx, i, ld(dy, i) * dgelu_(ld(x, i), tanh_approx));
}

__global__ void rope_2d_kernel(KOut x, const int32_t* pos, int64_t T, int64_t heads, int64_t hd, float theta,
                               float sign) {
  const int half = static_cast<int>(hd / 2), q = half / 2;
  const int64_t n = T * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half, t = th / heads;
    const int j = i < q ? i : i - q;
    const float inv_freq = 1.f / powf(theta, float(2 * j) / float(half));
    rotate_half_pair(x, th * hd, i, half, float(pos[(i < q ? 0 : T) + t]) * inv_freq, sign);
  }
}

}  // namespace

cudaError_t launch_layer_norm_fwd(KIn x, KIn w, KIn b, float eps, KOut y, float* mean, float* rstd, int64_t rows,
                                  int64_t n, cudaStream_t s) {
  if (rows > 0) layer_norm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, w, b, eps, y, mean, rstd, n);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_bwd(KIn dy, KIn x, KIn w, const float* mean, const float* rstd, KOut dx, int64_t rows,
                                  int64_t n, cudaStream_t s) {
  if (rows > 0) layer_norm_bwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, w, mean, rstd, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_fwd(KIn x, bool tanh_approx, KOut y, int64_t n, cudaStream_t s) {
  if (n > 0) gelu_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, tanh_approx, y, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_bwd(KIn dy, KIn x, bool tanh_approx, KOut dx, int64_t n, cudaStream_t s) {
  if (n > 0) gelu_bwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dy, x, tanh_approx, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_rope_2d(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, float theta,
                           bool inverse, cudaStream_t s) {
  const int64_t n = T * heads * (hd / 2);
  if (n > 0) rope_2d_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, positions, T, heads, hd, theta, inverse ? -1.f : 1.f);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
