// L2 normalisation of q and k per head (spec §3.4 step 7, §3.10), one warp per row of length n = dk:
//   forward:  ρ = 1/sqrt(Σx² + eps);  y (=) scale·x·ρ (F32);  rstd (=) ρ
//   backward (with the GVA sum of spec §4.3 step 7): dŷ = scale·Σ_{value heads of the group} dyh,
//             x̂ = x·ρ;  dx (=) ρ·(dŷ − x̂·Σ(dŷ⊙x̂))
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "gdn/gdn.cuh"
#include "gdn/l2norm_row.cuh"

namespace deltatune::kernels {
namespace {

// One warp per row (rows are short: dk = 128 is 4 values per lane), 8 rows per block: no block barriers and
// 8x fewer blocks than a block per row (that version was launch/barrier-bound: 127 us for T 4096, HK 16).
constexpr int kRowsPerBlock = 8;
constexpr int kThreads = 32 * kRowsPerBlock;

__global__ void l2norm_fwd_kernel(KIn x, float scale, float eps, float* y, float* rstd, int64_t rows, int64_t n) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t base = row * n;
  float ss = 0.f;
  for (int64_t c = lane; c < n; c += 32) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) + eps);
  if (lane == 0) rstd[row] = r;
  if (y)
    for (int64_t c = lane; c < n; c += 32) y[base + c] = scale * ld(x, base + c) * r;
}

// One warp per (t, key head).
__global__ void l2norm_bwd_gva_kernel(KIn dyh, KIn x, const float* rstd, float scale, KOut dx, int64_t rows,
                                      int64_t HK, int64_t HV, int64_t n) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);  // t·HK + j
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t t = row / HK, j = row % HK;
  const int64_t r = HV / HK;
  const float rho = rstd[row];
  float dot = 0.f;
  for (int64_t c = lane; c < n; c += 32) {
    float d = 0.f;
    for (int64_t m = 0; m < r; ++m) d += ld(dyh, ((t * HV) + j * r + m) * n + c);
    dot += scale * d * ld(x, row * n + c) * rho;
  }
  dot = warp_sum(dot);
  for (int64_t c = lane; c < n; c += 32) {
    float d = 0.f;
    for (int64_t m = 0; m < r; ++m) d += ld(dyh, ((t * HV) + j * r + m) * n + c);
    st(dx, row * n + c, rho * (scale * d - ld(x, row * n + c) * rho * dot));
  }
}

// dk = 128: each lane holds 4 consecutive values in registers (16-byte F32 loads/stores, one read of each
// input); the general kernels above loop over the row twice with one 4-byte access per lane in flight.
constexpr int kVecN = 128;

__global__ void l2norm_fwd_n128_kernel(KIn x, float scale, float eps, float* y, float* rstd, int64_t rows) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t base = row * kVecN + 4 * lane;
  float r;
  const float4 y4 = l2_row_normalise(l2_row_load4(x, base), scale, eps, r);
  if (lane == 0) rstd[row] = r;
  if (y) *reinterpret_cast<float4*>(y + base) = y4;
}

// The backward for dk = 128 takes half a warp per row: 8 consecutive values per lane (one 16-byte access per
// bf16 row, two per fp32 row), twice the bytes in flight per instruction of a warp-per-row layout (q's and k's
// rows in one launch: 0.122 -> 0.096 ms at T 8192, HK 16, HV 32; docs/perf/PERF_NOTES.md session 9).
constexpr int kBwdRowsPerBlock = 2 * kRowsPerBlock;
__device__ __forceinline__ void load8(KIn x, int64_t at, float (&v)[8]) {
  if (x.t == KType::BF16) {  // at is a multiple of 8
    const Bf16x8 b = ld8(x.p, at / 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = b.v[e];
  } else if (x.t == KType::F32) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(x.p) + at);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(x.p) + at + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = ld(x, at + e);
  }
}
__device__ __forceinline__ void store8(KOut x, int64_t at, const float (&v)[8]) {
  if (x.t == KType::BF16) {
    Bf16x8 b;
#pragma unroll
    for (int e = 0; e < 8; ++e) b.v[e] = v[e];
    st8(x.p, at / 8, b);
  } else if (x.t == KType::F32) {
    *reinterpret_cast<float4*>(static_cast<float*>(x.p) + at) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(static_cast<float*>(x.p) + at + 4) = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) st(x, at + e, v[e]);
  }
}

// Rows [0, rows) of a, then, when total is 2·rows, those of b.
__global__ void l2norm_bwd_gva_n128_kernel(L2BwdArgs a, L2BwdArgs b, int64_t rows, int64_t total, int64_t HK,
                                           int64_t HV) {
  const int lane = threadIdx.x & 31, c = 8 * (lane & 15);
  int64_t row = (blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5)) * 2 + (lane >> 4);  // t·HK + j
  if (row >= total) row = -1;  // a dead half-warp still takes part in the shuffles
  const bool second = row >= rows;
  if (second) row -= rows;
  const KIn dyh = second ? b.dyh : a.dyh, x = second ? b.x : a.x;
  const float scale = second ? b.scale : a.scale;
  const int64_t t = row / HK, j = row % HK, r = HV / HK;
  float xv[8] = {}, d[8] = {}, rho = 0.f;
  if (row >= 0) {
    rho = (second ? b.rstd : a.rstd)[row];
    load8(x, row * kVecN + c, xv);
    for (int64_t m = 0; m < r; ++m) {
      float g[8];
      load8(dyh, ((t * HV) + j * r + m) * kVecN + c, g);
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] += g[e];
    }
  }
  float dot = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) dot += scale * d[e] * xv[e] * rho;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (row < 0) return;
  float y[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = rho * (scale * d[e] - xv[e] * rho * dot);
  store8(second ? b.dx : a.dx, row * kVecN + c, y);
}

// The n = 128 kernel's 8-value accesses: 16 bytes (bf16) or 2 x 16 (fp32) per lane.
bool l2_bwd_vec_ok(const L2BwdArgs& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a.dyh.p) && aligned(a.x.p) && aligned(a.dx.p);
}

}  // namespace

cudaError_t launch_l2norm_fwd(KIn x, float scale, float eps, float* y, float* rstd, int64_t rows, int64_t n,
                              cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows > 0 && n == kVecN && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(x.p) % 16 == 0)
    l2norm_fwd_n128_kernel<<<blocks, kThreads, 0, s>>>(x, scale, eps, y, rstd, rows);
  else if (rows > 0)
    l2norm_fwd_kernel<<<blocks, kThreads, 0, s>>>(x, scale, eps, y, rstd, rows, n);
  return cudaGetLastError();
}
cudaError_t launch_l2norm_bwd_gva(KIn dyh, KIn x, const float* rstd, float scale, KOut dx, int64_t T, int64_t HK,
                                  int64_t HV, int64_t n, cudaStream_t s) {
  const L2BwdArgs a{dyh, x, rstd, scale, dx};
  const int64_t rows = T * HK;
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows > 0 && n == kVecN && l2_bwd_vec_ok(a))
    l2norm_bwd_gva_n128_kernel<<<(rows + kBwdRowsPerBlock - 1) / kBwdRowsPerBlock, kThreads, 0, s>>>(a, a, rows,
                                                                                                       rows, HK, HV);
  else if (rows > 0)
    l2norm_bwd_gva_kernel<<<blocks, kThreads, 0, s>>>(dyh, x, rstd, scale, dx, rows, HK, HV, n);
  return cudaGetLastError();
}

cudaError_t launch_l2norm_bwd_gva2(const L2BwdArgs& a, const L2BwdArgs& b, int64_t T, int64_t HK, int64_t HV,
                                   int64_t n, cudaStream_t s) {
  const int64_t rows = T * HK;
  if (rows == 0 || n != kVecN || !l2_bwd_vec_ok(a) || !l2_bwd_vec_ok(b)) {
    const cudaError_t e = launch_l2norm_bwd_gva(a.dyh, a.x, a.rstd, a.scale, a.dx, T, HK, HV, n, s);
    return e != cudaSuccess ? e : launch_l2norm_bwd_gva(b.dyh, b.x, b.rstd, b.scale, b.dx, T, HK, HV, n, s);
  }
  const unsigned blocks = static_cast<unsigned>((2 * rows + kBwdRowsPerBlock - 1) / kBwdRowsPerBlock);
  l2norm_bwd_gva_n128_kernel<<<blocks, kThreads, 0, s>>>(a, b, rows, 2 * rows, HK, HV);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
