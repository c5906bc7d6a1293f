// One row of the GDN L2 norm (spec §3.4 step 7) held by a warp, 4 consecutive values per lane (dk = 128):
// the one definition of its arithmetic, shared by the L2 norm kernel (l2norm.cu) and the tensor-core prep
// that normalises q and k while loading them (chunk_prep_mma.cu), so both give bit-identical q̂, k̂.
#pragma once
#include <type_traits>

#include "common/device.cuh"

namespace deltatune::kernels {

// Lane's 4 values of row `at` (element offset of the lane's first value; 16-byte loads for BF16 and F32).
__device__ __forceinline__ float4 l2_row_load4(KIn x, int64_t at) {
  if (x.t == KType::BF16) {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(x.p) + at);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
  }
  if (x.t == KType::F32) return *reinterpret_cast<const float4*>(static_cast<const float*>(x.p) + at);
  return make_float4(ld(x, at), ld(x, at + 1), ld(x, at + 2), ld(x, at + 3));
}

__device__ __forceinline__ float l2_lane_sumsq(float4 v) {
  float ss = 0.f;
  ss += v.x * v.x;
  ss += v.y * v.y;
  ss += v.z * v.z;
  ss += v.w * v.w;
  return ss;
}
__device__ __forceinline__ float4 l2_scaled(float4 v, float scale, float rho) {
  return make_float4(scale * v.x * rho, scale * v.y * rho, scale * v.z * rho, scale * v.w * rho);
}

// ρ = 1/sqrt(Σx² + eps) over the warp's row (every lane of the warp must call it); returns scale·x·ρ.
__device__ __forceinline__ float4 l2_row_normalise(float4 v, float scale, float eps, float& rho) {
  rho = rsqrtf(warp_sum(l2_lane_sumsq(v)) + eps);
  return l2_scaled(v, scale, rho);
}

// N rows at once (v[i]: the lane's values of row i), the same arithmetic per row as l2_row_normalise; the N
// butterfly sums advance in lockstep so their shuffles overlap instead of forming one long dependency chain.
template <int N>
__device__ __forceinline__ void l2_rows_normalise(float4 (&v)[N], float scale, float eps, float (&rho)[N]) {
  float ss[N];
#pragma unroll
  for (int i = 0; i < N; ++i) ss[i] = l2_lane_sumsq(v[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], o);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    rho[i] = rsqrtf(ss[i] + eps);
    v[i] = l2_scaled(v[i], scale, rho[i]);
  }
}

// A lane's 4 values of a q or k row as a backward kernel holds them between load and use (GdnQK): before the
// norm as 4 bf16 (R16, normalised by l2_value with the row's ρ) or normalised already (fp32).
template <bool R16>
using L2Row = std::conditional_t<R16, uint2, float4>;
template <class Row>
__device__ __forceinline__ Row ld_l2_row(const void* p, int64_t at) {
  using E = std::conditional_t<std::is_same_v<Row, uint2>, __nv_bfloat16, float>;
  return *reinterpret_cast<const Row*>(static_cast<const E*>(p) + at);
}
__device__ __forceinline__ float4 l2_value(uint2 x, float scale, float rho) {
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.y));
  return l2_scaled(make_float4(a.x, a.y, b.x, b.y), scale, rho);
}
__device__ __forceinline__ float4 l2_value(float4 x, float, float) {
  return x;
}

}  // namespace deltatune::kernels
