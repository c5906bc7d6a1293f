// Block-wide exclusive scan of one int per thread, for the MoE dispatch and tile-map kernels.
// Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

namespace deltatune::kernels {

// blockDim.x a multiple of 32 (at most 1024); every thread of the block must call it. Returns the sum of
// v over the threads before this one; *total (every thread) gets the block sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* total) {
  __shared__ int warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nw ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive prefix over warps
  }
  __syncthreads();
  *total = warp_sums[nw - 1];
  return x - v + (warp > 0 ? warp_sums[warp - 1] : 0);
}

}  // namespace deltatune::kernels
