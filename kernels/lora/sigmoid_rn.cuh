// sigmoidf_ (common/device.cuh) with the same bits in fewer instructions, for x > -87 (kSigmoidFastMin).
// sigmoidf_ is 1 / (1 + expf(-x)); the IEEE reciprocal compiles to MUFU.RCP, one Newton step and a check of the
// operand's exponent that sends 2^126 <= y (and inf / NaN) to a slow subroutine: ~10 instructions and a branch per
// element. With x > -87, y = 1 + e^-x lies in [1, 2^126), where that check always takes the fast path, so
// rcp_rn_normal writes the fast path alone (the same instructions, so the same bits). Callers test a whole group of
// elements once (min > kSigmoidFastMin) and take sigmoidf_ for a group that fails.
#pragma once
#include "common/device.cuh"

namespace deltatune::kernels {

constexpr float kSigmoidFastMin = -87.f;

// 1 / y rounded to nearest for y in [2^-126, 2^126): MUFU.RCP, then r + r·(1 − y·r) (rcp.rn.f32's fast path).
__device__ __forceinline__ float rcp_rn_normal(float y) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return __fmaf_rn(r, __fmaf_rn(-y, r, 1.f), r);
}

// sigmoidf_(x) for x > kSigmoidFastMin (same expression, so the compiler fuses e^-x's scale with the + 1 alike).
__device__ __forceinline__ float sigmoid_fast(float x) { return rcp_rn_normal(1.f + expf(-x)); }

}  // namespace deltatune::kernels
