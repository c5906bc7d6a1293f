// Partial rotary embedding, NeoX rotate-half (spec §3.5), in place on x (T, heads, hd):
//   for i < rot_dim/2: φ = pos[t]·θ^(−2i/rot_dim) (negated when inverse);
//   x'[i] = x[i]·cos φ − x[i+h]·sin φ,  x'[i+h] = x[i+h]·cos φ + x[i]·sin φ  (h = rot_dim/2)
//   dims ≥ rot_dim untouched. inverse = rotation by −φ, which is also the backward.
// Multimodal (Qwen3.5 interleaved mrope): pos is [3, T] and slot i takes row 1 when i % 3 == 1 and
//   i < 3·sec_h, row 2 when i % 3 == 2 and i < 3·sec_w, else row 0 (sec_h = sec_w = 0: plain rope).
// Memory: one thread per (t, i) slot: the angle (powf, sincosf) once for all heads of the token, then each
// head's pair read and written (=, in place), kHeadStep heads' loads before their stores. (One thread per (t,
// head, i) computed the same angle for every head, after 64-bit divisions per element: issue-bound, ~10 us a
// call at 2b, 4096 tokens, where the bytes take ~3.) Same angle arithmetic, so the same bits.
#include "common/device.cuh"
#include "rope/rope.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kHeadStep = 4;

__global__ void rope_kernel(KOut x, const int32_t* pos, int64_t T, int64_t heads, int64_t hd, int half,
                            float theta, float sign, int sec_h, int sec_w) {
  const int64_t n = T * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t t = idx / half;
    // θ^(−2i/rot_dim) = θ^(−i/half), as HF: 1 / θ^(2i/rot_dim) in fp32.
    const float inv_freq = 1.f / powf(theta, float(2 * i) / float(2 * half));
    const int row = (i % 3 == 1 && i < 3 * sec_h) ? 1 : (i % 3 == 2 && i < 3 * sec_w) ? 2 : 0;
    float sn, cs;
    sincosf(float(pos[row * T + t]) * inv_freq, &sn, &cs);
    sn *= sign;
    const int64_t b0 = t * heads * hd + i;
    for (int64_t h0 = 0; h0 < heads; h0 += kHeadStep) {
      float a0[kHeadStep], a1[kHeadStep];
#pragma unroll
      for (int k = 0; k < kHeadStep; ++k)
        if (h0 + k < heads) a0[k] = ld(x, b0 + (h0 + k) * hd), a1[k] = ld(x, b0 + (h0 + k) * hd + half);
#pragma unroll
      for (int k = 0; k < kHeadStep; ++k)
        if (h0 + k < heads) {
          st(x, b0 + (h0 + k) * hd, a0[k] * cs - a1[k] * sn);
          st(x, b0 + (h0 + k) * hd + half, a1[k] * cs + a0[k] * sn);
        }
    }
  }
}

}  // namespace

cudaError_t launch_rope(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, int rot_dim,
                        float theta, bool inverse, cudaStream_t s) {
  const int half = rot_dim / 2;
  const int64_t n = T * half;
  if (n > 0 && heads > 0)
    rope_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, positions, T, heads, hd, half, theta,
                                                 inverse ? -1.f : 1.f, 0, 0);
  return cudaGetLastError();
}

cudaError_t launch_rope_multimodal(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd,
                                   int rot_dim, float theta, int section_h, int section_w, bool inverse,
                                   cudaStream_t s) {
  const int half = rot_dim / 2;
  const int64_t n = T * half;
  if (n > 0 && heads > 0)
    rope_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, positions, T, heads, hd, half, theta,
                                                 inverse ? -1.f : 1.f, section_h, section_w);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
