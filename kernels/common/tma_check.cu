// Device check of the TMA image tiles (common/tma.cuh), run by tests/cuda/tma_test.cpp: one block copies a
// tile with tma::image_tile and reads every element back through the layout formula the wgmma kernels use.
#include <cuda_bf16.h>

#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/tma_check.h"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;

__global__ void __launch_bounds__(128)
    tma_check_kernel(const __grid_constant__ tma::ImageMap map, int rows, int cols, bool sw32, int row0,
                     int h, int col0, bf16* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char tile[];  // the tile, then the mbarrier
  const uint32_t dst = mma::smem_addr(tile), bar = dst + rows * cols * 2;
  if (threadIdx.x == 0) {
    tma::mbar_init(bar, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(rows * cols * 2));
    tma::image_tile(dst, map, row0, h, bar, col0);
  }
  tma::mbar_wait(bar, 0);
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    const uint32_t off =
        sw32 ? (c >> 4) * rows * 32 + r * 32 + ((((c >> 3) ^ (r >> 2)) & 1) << 4) + (c & 7) * 2
             : (c >> 3) * rows * 16 + r * 16 + (c & 7) * 2;
    out[i] = *reinterpret_cast<const bf16*>(tile + off);
  }
#else
  __trap();
#endif
}

}  // namespace

cudaError_t tma_image_tile_check(const void* src, int64_t nrows, int64_t heads, int rows, bool sw32, int cols,
                                 int row0, int h, int col0, void* out, int width, bool one_box) {
  tma::ImageMap map{};
  if (!tma::encode_image_map(map, src, nrows, heads, rows, sw32, cols, width, one_box))
    return cudaErrorNotSupported;
  const int smem = rows * cols * 2 + 8;
  cudaError_t e = cudaFuncSetAttribute(tma_check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  tma_check_kernel<<<1, 128, smem>>>(map, rows, cols, sw32, row0, h, col0, static_cast<bf16*>(out));
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return cudaDeviceSynchronize();
}

}  // namespace deltatune::kernels
