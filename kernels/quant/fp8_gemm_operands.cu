// Block-scaled FP8 GEMM operands (fp8_gemm_operands.cuh).
//   quantize_rows: one warp per (row, 128-column group), 4 values a lane (the group's amax by warp shuffles).
//   transpose: 64x64-byte tiles through shared memory, 4-byte loads and stores.
#include <cuda_fp8.h>

#include "common/device.cuh"
#include "quant/fp8_gemm_operands.cuh"

namespace deltatune::kernels {
namespace {

constexpr float kFp8Max = 448.f;
constexpr int kGroup = 128;
constexpr int kTile = 64;

__global__ void fp8_quantize_rows_kernel(KIn x, int64_t rows, int64_t cols, uint8_t* values, float* scales,
                                         int64_t scale_ld) {
  const int64_t groups = cols / kGroup;
  const int64_t task = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (task >= rows * groups) return;
  const int lane = threadIdx.x & 31;
  const int64_t r = task / groups, g = task % groups;
  const int64_t base = r * cols + g * kGroup + lane * 4;
  float v[4];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = ld(x, base + i);
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = amax > 0.f ? kFp8Max / amax : 1.f;
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float q = fminf(fmaxf(v[i] * scale, -kFp8Max), kFp8Max);
    packed |= uint32_t(__nv_fp8_e4m3(q).__x) << (8 * i);
  }
  *reinterpret_cast<uint32_t*>(values + base) = packed;
  if (lane == 0) scales[g * scale_ld + r] = 1.f / scale;
}

__global__ void fp8_transpose_kernel(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.x; i < kTile * kTile / 4; i += blockDim.x) {
    const int r = i / (kTile / 4), c = (i % (kTile / 4)) * 4;
    const uint32_t v = *reinterpret_cast<const uint32_t*>(in + (r0 + r) * cols + c0 + c);
#pragma unroll
    for (int b = 0; b < 4; ++b) tile[r][c + b] = uint8_t(v >> (8 * b));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile / 4; i += blockDim.x) {
    const int c = i / (kTile / 4), r = (i % (kTile / 4)) * 4;
    const uint32_t v = uint32_t(tile[r][c]) | uint32_t(tile[r + 1][c]) << 8 | uint32_t(tile[r + 2][c]) << 16 |
                       uint32_t(tile[r + 3][c]) << 24;
    *reinterpret_cast<uint32_t*>(out + (c0 + c) * rows + r0 + r) = v;
  }
}

__global__ void fp8_block_scales_kernel(const float* in, int64_t nrb, int64_t ncb, bool transpose, float* out,
                                        int64_t out_ld) {
  const int64_t out_rows = transpose ? ncb : nrb, out_cols = transpose ? nrb : ncb;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= out_rows * out_ld) return;
  const int64_t r = i / out_ld, c = i % out_ld;
  out[i] = c < out_cols ? (transpose ? in[c * ncb + r] : in[r * ncb + c]) : 0.f;
}

}  // namespace

cudaError_t launch_fp8_quantize_rows(KIn x, int64_t rows, int64_t cols, uint8_t* values, float* scales,
                                     int64_t scale_ld, cudaStream_t s) {
  if (cols % kGroup != 0 || scale_ld < rows) return cudaErrorInvalidValue;
  const int64_t tasks = rows * (cols / kGroup);
  if (tasks == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (tasks + kThreads / 32 - 1) / (kThreads / 32);
  fp8_quantize_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, rows, cols, values, scales,
                                                                              scale_ld);
  return cudaGetLastError();
}

cudaError_t launch_fp8_transpose(const uint8_t* values, int64_t rows, int64_t cols, uint8_t* values_t,
                                 cudaStream_t s) {
  if (rows % kTile != 0 || cols % kTile != 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(cols / kTile), static_cast<unsigned>(rows / kTile));
  fp8_transpose_kernel<<<grid, 256, 0, s>>>(values, rows, cols, values_t);
  return cudaGetLastError();
}

cudaError_t launch_fp8_block_scales(const float* in, int64_t nrb, int64_t ncb, bool transpose, float* out,
                                    int64_t out_ld, cudaStream_t s) {
  const int64_t out_rows = transpose ? ncb : nrb, out_cols = transpose ? nrb : ncb;
  if (out_ld < out_cols) return cudaErrorInvalidValue;
  const int64_t n = out_rows * out_ld;
  if (n == 0) return cudaSuccess;
  fp8_block_scales_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(in, nrb, ncb, transpose, out,
                                                                                 out_ld);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
