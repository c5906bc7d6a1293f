// Device check of the wgmma helpers' layout rules (common/wgmma.cuh), run by tests/cuda/wgmma_test.cpp: one
// warpgroup forms C = A·Bᵀ (64 x 64, k = 64) from core-layout tiles, each operand K-major or MN-major, writes
// C as the accumulator layout says, and also stores bf16(C) transposed into a core-layout tile by stmatrix
// and reads it back element by element.
#include <cuda_bf16.h>

#include <cmath>
#include <vector>

#include "common/mma.cuh"
#include "common/wgmma.cuh"
#include "common/wgmma_check.h"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;

template <int TA, int TB>
__global__ void __launch_bounds__(128)
    wgmma_check_kernel(const float* A, const float* B, float* C, float* Ct) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) bf16 As[64 * 64], Bs[64 * 64], Ts[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += 128) {
    const int r = i / 64, k = i % 64;  // A[r][k], B[r][k] (B's rows are n)
    // MN-major B: stored as the tile of B[k][n] (rows k, n contiguous)
    Bs[(TB ? wgmma::core_offset<64>(k, r) : wgmma::core_offset<64>(r, k)) / 2] = __float2bfloat16(B[i]);
    // MN-major A: stored as the tile of Aᵀ (rows k, m contiguous)
    As[(TA ? wgmma::core_offset<64>(k, r) : wgmma::core_offset<64>(r, k)) / 2] = __float2bfloat16(A[i]);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  float d[32];
  for (float& x : d) x = 0.f;
  wgmma::fence();
  const uint32_t a = mma::smem_addr(As), b = mma::smem_addr(Bs);
  for (int j = 0; j < 4; ++j) {
    const uint64_t da = TA ? wgmma::desc(a + 2 * 1024 * j, 1024, 128) : wgmma::desc(a + 256 * j, 128, 1024);
    const uint64_t db = TB ? wgmma::desc(b + 2 * 1024 * j, 1024, 128) : wgmma::desc(b + 256 * j, 128, 1024);
    wgmma::mma_m64n64<TA, TB>(d, da, db, j > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = 0; i < 32; ++i)
    C[(16 * w + lane / 4 + 8 * ((i / 2) % 2)) * 64 + (i / 4) * 8 + (lane % 4) * 2 + i % 2] = d[i];
  // bf16(C)ᵀ into Ts (rows = C's columns, core layout), as the GDN scan stores S and V'.
  const int mi = lane >> 3, r = lane & 7;
  for (int jj = 0; jj < 4; ++jj) {
    const int jb = 2 * jj + (mi >> 1), hf = mi & 1;
    wgmma::stmatrix_x4_trans(
        mma::smem_addr(Ts) + jb * 1024 + ((16 * w + 8 * hf) >> 3) * 128 + r * 16,
        mma::pack_bf16(d[8 * jj], d[8 * jj + 1]), mma::pack_bf16(d[8 * jj + 2], d[8 * jj + 3]),
        mma::pack_bf16(d[8 * jj + 4], d[8 * jj + 5]), mma::pack_bf16(d[8 * jj + 6], d[8 * jj + 7]));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 64 * 64; i += 128) {
    const int n = i / 64, m = i % 64;
    Ct[n * 64 + m] = __bfloat162float(Ts[wgmma::core_offset<64>(n, m) / 2]);
  }
#else
  __trap();
#endif
}

}  // namespace

cudaError_t wgmma_check_m64n64(bool a_mn_major, bool b_mn_major, double* max_err, double* max_err_t) {
  std::vector<float> A(4096), B(4096), R(4096), C(4096), Ct(4096);
  for (int i = 0; i < 4096; ++i) {  // exact in bf16, exact sums in fp32
    A[i] = float((i * 37) % 17 - 8) / 8;
    B[i] = float((i * 53) % 13 - 6) / 4;
  }
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      double s = 0;
      for (int k = 0; k < 64; ++k) s += double(A[m * 64 + k]) * B[n * 64 + k];
      R[m * 64 + n] = float(s);
    }
  float* dev = nullptr;
  cudaError_t e = cudaMalloc(&dev, 4 * 4096 * sizeof(float));
  if (e != cudaSuccess) return e;
  cudaMemcpy(dev, A.data(), 16384, cudaMemcpyHostToDevice);
  cudaMemcpy(dev + 4096, B.data(), 16384, cudaMemcpyHostToDevice);
  auto* kernel = a_mn_major ? (b_mn_major ? wgmma_check_kernel<1, 1> : wgmma_check_kernel<1, 0>)
                            : (b_mn_major ? wgmma_check_kernel<0, 1> : wgmma_check_kernel<0, 0>);
  kernel<<<1, 128>>>(dev, dev + 4096, dev + 8192, dev + 12288);
  e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(C.data(), dev + 8192, 16384, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(Ct.data(), dev + 12288, 16384, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  *max_err = *max_err_t = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      const float r = R[m * 64 + n];
      *max_err = std::fmax(*max_err, std::fabs(C[m * 64 + n] - r));
      *max_err_t = std::fmax(*max_err_t, std::fabs(Ct[n * 64 + m] - __bfloat162float(__float2bfloat16(r))));
    }
  return e;
}

}  // namespace deltatune::kernels
