// Partial rotary embedding, NeoX rotate-half (spec §3.5), in place on x (T, heads, hd):
//   for i < rot_dim/2: φ = pos[t]·θ^(−2i/rot_dim) (negated when inverse);
//   x'[i] = x[i]·cos φ − x[i+h]·sin φ,  x'[i+h] = x[i+h]·cos φ + x[i]·sin φ  (h = rot_dim/2)
//   dims ≥ rot_dim untouched. inverse = rotation by −φ, which is also the backward.
// Multimodal (Qwen3.5 interleaved mrope): pos is [3, T] and slot i takes row 1 when i % 3 == 1 and
//   i < 3·sec_h, row 2 when i % 3 == 2 and i < 3·sec_w, else row 0 (sec_h = sec_w = 0: plain rope).
// Memory: one thread per (t, head, i) pair reads and writes its two elements (=, in place).
#include "common/device.cuh"
#include "rope/rope.cuh"
#include "rope/rotate_half.cuh"

namespace deltatune::kernels {
namespace {

__global__ void rope_kernel(KOut x, const int32_t* pos, int64_t T, int64_t heads, int64_t hd, int half,
                            float theta, float sign, int sec_h, int sec_w) {
  const int64_t n = T * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;
    const int64_t t = th / heads;
    // θ^(−2i/rot_dim) = θ^(−i/half), as HF: 1 / θ^(2i/rot_dim) in fp32.
    const float inv_freq = 1.f / powf(theta, float(2 * i) / float(2 * half));
    const int row = (i % 3 == 1 && i < 3 * sec_h) ? 1 : (i % 3 == 2 && i < 3 * sec_w) ? 2 : 0;
    rotate_half_pair(x, th * hd, i, half, float(pos[row * T + t]) * inv_freq, sign);
  }
}

}  // namespace

cudaError_t launch_rope(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, int rot_dim,
                        float theta, bool inverse, cudaStream_t s) {
  const int half = rot_dim / 2;
  const int64_t n = T * heads * half;
  if (n > 0)
    rope_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, positions, T, heads, hd, half, theta,
                                                 inverse ? -1.f : 1.f, 0, 0);
  return cudaGetLastError();
}

cudaError_t launch_rope_multimodal(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd,
                                   int rot_dim, float theta, int section_h, int section_w, bool inverse,
                                   cudaStream_t s) {
  const int half = rot_dim / 2;
  const int64_t n = T * heads * half;
  if (n > 0)
    rope_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, positions, T, heads, hd, half, theta,
                                                 inverse ? -1.f : 1.f, section_h, section_w);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
