// Block-scaled FP8 GEMM operands (fp8_gemm_operands.cuh).
//   quantize_rows: 16 lanes per (row, 128-column group), 8 values a lane (the group's amax by shuffles).
//   transpose: 64x64-byte tiles through shared memory, 4-byte loads and stores.
#include <cuda_fp8.h>

#include "common/device.cuh"
#include "quant/fp8_gemm_operands.cuh"

namespace deltatune::kernels {
namespace {

constexpr float kFp8Max = 448.f;
constexpr int kGroup = 128;
constexpr int kTile = 64;

// 16 lanes a 128-column group (8 values a lane: one 16-byte load of bf16), two groups a warp.
template <typename T>
__device__ __forceinline__ void load8(KIn x, int64_t i, float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const T*>(x.p) + i);
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = float(h[j]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = ld(x, i + j);
  }
}

template <typename T>
__global__ void fp8_quantize_rows_kernel(KIn x, int64_t rows, int64_t cols, uint8_t* values, int64_t values_ld,
                                         float* scales, int64_t scale_ld) {
  const int64_t groups = cols / kGroup;
  const int64_t task = int64_t(blockIdx.x) * (blockDim.x / 16) + threadIdx.x / 16;
  if (task >= rows * groups) return;  // both halves of a warp hold whole groups: the shuffles stay in a half
  const int lane = threadIdx.x & 15;
  const int64_t r = task / groups, g = task % groups;
  const int64_t col = g * kGroup + lane * 8;
  float v[8];
  load8<T>(x, r * cols + col, v);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const unsigned half = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(half, amax, o));
  const float scale = amax > 0.f ? kFp8Max / amax : 1.f;
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float q = fminf(fmaxf(v[i] * scale, -kFp8Max), kFp8Max);
    packed[i / 4] |= uint32_t(__nv_fp8_e4m3(q).__x) << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(values + r * values_ld + col) = make_uint2(packed[0], packed[1]);
  if (lane == 0) scales[g * scale_ld + r] = 1.f / scale;
}

__global__ void fp8_transpose_kernel(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out, int64_t out_ld) {
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
    *reinterpret_cast<uint32_t*>(out + (c0 + c) * out_ld + r0 + r) = v;
  }
}

__global__ void fp8_block_scales_kernel(const float* in, int64_t nrb, int64_t ncb, bool transpose, float* out,
                                        int64_t out_ld) {
  const int64_t out_rows = transpose ? ncb : nrb, out_cols = transpose ? nrb : ncb;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= out_rows * out_cols) return;
  const int64_t r = i / out_cols, c = i % out_cols;
  out[r * out_ld + c] = transpose ? in[c * ncb + r] : in[r * ncb + c];
}

}  // namespace

cudaError_t launch_fp8_quantize_rows(KIn x, int64_t rows, int64_t cols, uint8_t* values, int64_t values_ld,
                                     float* scales, int64_t scale_ld, cudaStream_t s) {
  if (cols % kGroup != 0 || scale_ld < rows || values_ld < cols || values_ld % 8 != 0 ||
      reinterpret_cast<uintptr_t>(values) % 8 != 0)
    return cudaErrorInvalidValue;
  const int64_t tasks = rows * (cols / kGroup);
  if (tasks == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((tasks + kThreads / 16 - 1) / (kThreads / 16));
  // The 16-byte loads need x 16-byte aligned (cols is a multiple of 128: every row then is).
  if (x.t == KType::BF16 && reinterpret_cast<uintptr_t>(x.p) % 16 == 0)
    fp8_quantize_rows_kernel<__nv_bfloat16>
        <<<blocks, kThreads, 0, s>>>(x, rows, cols, values, values_ld, scales, scale_ld);
  else if (x.t == KType::F16 && reinterpret_cast<uintptr_t>(x.p) % 16 == 0)
    fp8_quantize_rows_kernel<__half><<<blocks, kThreads, 0, s>>>(x, rows, cols, values, values_ld, scales, scale_ld);
  else
    fp8_quantize_rows_kernel<float><<<blocks, kThreads, 0, s>>>(x, rows, cols, values, values_ld, scales, scale_ld);
  return cudaGetLastError();
}

cudaError_t launch_fp8_transpose(const uint8_t* values, int64_t rows, int64_t cols, uint8_t* values_t,
                                 int64_t out_ld, cudaStream_t s) {
  if (rows % kTile != 0 || cols % kTile != 0 || out_ld < rows || out_ld % 4 != 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(cols / kTile), static_cast<unsigned>(rows / kTile));
  fp8_transpose_kernel<<<grid, 256, 0, s>>>(values, rows, cols, values_t, out_ld);
  return cudaGetLastError();
}

cudaError_t launch_fp8_block_scales(const float* in, int64_t nrb, int64_t ncb, bool transpose, float* out,
                                    int64_t out_ld, cudaStream_t s) {
  const int64_t out_rows = transpose ? ncb : nrb, out_cols = transpose ? nrb : ncb;
  if (out_ld < out_cols) return cudaErrorInvalidValue;
  const int64_t n = out_rows * out_cols;
  if (n == 0) return cudaSuccess;
  fp8_block_scales_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(in, nrb, ncb, transpose, out,
                                                                                 out_ld);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
