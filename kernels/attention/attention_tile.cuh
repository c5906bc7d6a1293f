// Shared-memory tile helpers for the attention kernels (device only).
#pragma once
#include "common/device.cuh"

namespace deltatune::kernels::attn {

constexpr int kThreads = 128;  // 16 rows × 8 lanes per row

// dst[r][d] (row stride hd+1) (=) mul·src[(t0 + r)·heads + head][d] for r < rows; rows with t0 + r >= t_end are 0.
__device__ __forceinline__ void load_tile(float* dst, KIn src, int64_t t0, int rows, int64_t t_end, int64_t heads,
                                          int64_t head, int hd, float mul) {
  for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    const int64_t t = t0 + r;
    dst[r * (hd + 1) + d] = t < t_end ? mul * ld(src, (t * heads + head) * hd + d) : 0.f;
  }
}

}  // namespace deltatune::kernels::attn
