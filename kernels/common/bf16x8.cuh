// 8 bf16 values per thread (16-byte loads/stores) for kernels whose operands are all bf16.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

struct Bf16x8 {
  float v[8];
};
// A group of 8 bf16 as loaded (16 bytes, 4 registers), for a group held packed and widened later.
__device__ __forceinline__ uint4 ld8_raw(const void* p, int64_t i) { return static_cast<const uint4*>(p)[i]; }
__device__ __forceinline__ Bf16x8 unpack8(const uint4& raw) {  // exact (bf16 -> f32 is a shift)
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Bf16x8 r;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    r.v[2 * k] = f.x, r.v[2 * k + 1] = f.y;
  }
  return r;
}
// Element group i (elements 8i .. 8i+7) of a bf16 array.
__device__ __forceinline__ Bf16x8 ld8(const void* p, int64_t i) { return unpack8(ld8_raw(p, i)); }
__device__ __forceinline__ void st8(void* p, int64_t i, const Bf16x8& x) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(x.v[2 * k], x.v[2 * k + 1]);
  static_cast<uint4*>(p)[i] = raw;
}

// Every pointer bf16 and 16-byte aligned, n a multiple of 8 (host side).
template <class... P> bool all_bf16x8(int64_t n, const P&... p) {
  return n % 8 == 0 && ((p.t == KType::BF16 && reinterpret_cast<uintptr_t>(p.p) % 16 == 0) && ...);
}

}  // namespace deltatune::kernels
