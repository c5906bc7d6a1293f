// L2 normalisation of q and k per head (spec §3.4 step 7, §3.10), one warp per row of length n = dk:
//   forward:  ρ = 1/sqrt(Σx² + eps);  y (=) scale·x·ρ (F32);  rstd (=) ρ
//   backward (with the GVA sum of spec §4.3 step 7): dŷ = scale·Σ_{value heads of the group} dyh,
//             x̂ = x·ρ;  dx (=) ρ·(dŷ − x̂·Σ(dŷ⊙x̂))
#include "common/device.cuh"
#include "common/mma.cuh"
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

// Rows [0, rows) of a, then (when the grid covers 2·rows) those of b.
__global__ void l2norm_bwd_gva_n128_kernel(L2BwdArgs a, L2BwdArgs b, int64_t rows, int64_t HK, int64_t HV) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);  // t·HK + j
  const int lane = threadIdx.x & 31;
  if (row >= 2 * rows) return;
  const bool second = row >= rows;
  if (second) row -= rows;
  const KIn dyh = second ? b.dyh : a.dyh, x = second ? b.x : a.x;
  const float* rstd = second ? b.rstd : a.rstd;
  const float scale = second ? b.scale : a.scale;
  const KOut dx = second ? b.dx : a.dx;
  const int64_t t = row / HK, j = row % HK, r = HV / HK;
  const float rho = rstd[row];
  const int64_t at = row * kVecN + 4 * lane;
  const float4 x4 = l2_row_load4(x, at);
  float d[4] = {0.f, 0.f, 0.f, 0.f}, dot = 0.f;
  for (int64_t m = 0; m < r; ++m) {
    const float4 g = l2_row_load4(dyh, ((t * HV) + j * r + m) * kVecN + 4 * lane);
    d[0] += g.x, d[1] += g.y, d[2] += g.z, d[3] += g.w;
  }
  const float xv[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) dot += scale * d[e] * xv[e] * rho;
  dot = warp_sum(dot);
  float y[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) y[e] = rho * (scale * d[e] - xv[e] * rho * dot);
  if (dx.t == KType::BF16) {
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(dx.p) + at) =
        make_uint2(mma::pack_bf16(y[0], y[1]), mma::pack_bf16(y[2], y[3]));
  } else if (dx.t == KType::F32) {
    *reinterpret_cast<float4*>(static_cast<float*>(dx.p) + at) = make_float4(y[0], y[1], y[2], y[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) st(dx, at + e, y[e]);
  }
}

// The n = 128 kernel's 4-value accesses: 8 bytes (bf16) or 16 (fp32) per lane.
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
    l2norm_bwd_gva_n128_kernel<<<blocks, kThreads, 0, s>>>(a, a, rows, HK, HV);
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
  const unsigned blocks = static_cast<unsigned>((2 * rows + kRowsPerBlock - 1) / kRowsPerBlock);
  l2norm_bwd_gva_n128_kernel<<<blocks, kThreads, 0, s>>>(a, b, rows, HK, HV);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
