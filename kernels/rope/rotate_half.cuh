// The NeoX rotate-half step of the vision tower's 2-D rope (vit/vision_ops.cu; rope/rope.cu, text and multimodal,
// does the same step for every head of a token from one angle):
//   x'[b+i] = x[b+i]·cos φ − x[b+i+half]·sin φ,  x'[b+i+half] = x[b+i+half]·cos φ + x[b+i]·sin φ,
//   φ = sign·ang (sign −1: the inverse rotation, which is also the backward). In place (=), fp32 in registers.
#pragma once
#include "common/device.cuh"

namespace deltatune::kernels {

__device__ __forceinline__ void rotate_half_pair(KOut x, int64_t b, int i, int half, float ang, float sign) {
  float sn, cs;
  sincosf(ang, &sn, &cs);
  sn *= sign;
  const float a0 = ld(x, b + i), a1 = ld(x, b + i + half);
  st(x, b + i, a0 * cs - a1 * sn);
  st(x, b + i + half, a1 * cs + a0 * sn);
}

}  // namespace deltatune::kernels
