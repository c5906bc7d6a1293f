// Quantized frozen base: load-time quantization and dequantization right before the GEMM.
//   fp8 quantize: one 256-thread block per 128x128 tile (amax, then the e4m3 values); dequantize: 8 values a
//     thread (one 8-byte load, one 16-byte bf16 store), the tile's scale read once per 8 values.
//   nf4 quantize: one warp per 64-value block (2 values a lane, one packed byte a lane); double quantization:
//     one block per 256 absmax with the dynamic map in shared memory; dequantize: 8 values a thread (4 bytes).
// Rounding matches the host reference (quant/quantize_host.cpp): nearest table value, ties to the lower one.
#include <cuda_fp8.h>

#include <algorithm>

#include "common/device.cuh"
#include "quant/quant.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kTile = 128;
constexpr int kNf4Block = 64;
constexpr int kNf4Block2 = 256;
constexpr float kFp8Max = 448.f;

__device__ __forceinline__ int nearest(const float* table, int n, float x) {
  int lo = 0, hi = n;  // first index with table[i] >= x
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (table[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return 0;
  if (lo == n) return n - 1;
  return (x - table[lo - 1]) <= (table[lo] - x) ? lo - 1 : lo;
}

// Separately rounded multiply and add (no FMA contraction): the same float as the host reference.
__device__ __forceinline__ float nf4_absmax(const uint8_t* qabsmax, const float* absmax2, const float* code2,
                                            float offset, int64_t b) {
  return __fadd_rn(__fmul_rn(code2[qabsmax[b]], absmax2[b / kNf4Block2]), offset);
}

__device__ __forceinline__ float fp8_to_f(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return static_cast<float>(f);
}

__global__ void fp8_quantize_kernel(KIn w, int64_t rows, int64_t cols, uint8_t* values, float* scale_inv) {
  __shared__ float scratch[32];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int64_t nr = rows - r0 < kTile ? rows - r0 : kTile, nc = cols - c0 < kTile ? cols - c0 : kTile;
  float amax = 0.f;
  for (int64_t k = threadIdx.x; k < nr * nc; k += blockDim.x) amax = fmaxf(amax, fabsf(ld(w, (r0 + k / nc) * cols + c0 + k % nc)));
  amax = block_max(amax, scratch);
  const float scale = amax > 0.f ? kFp8Max / amax : 1.f;
  if (threadIdx.x == 0) scale_inv[blockIdx.y * gridDim.x + blockIdx.x] = 1.f / scale;
  for (int64_t k = threadIdx.x; k < nr * nc; k += blockDim.x) {
    const int64_t i = (r0 + k / nc) * cols + c0 + k % nc;
    const float x = fminf(fmaxf(ld(w, i) * scale, -kFp8Max), kFp8Max);
    values[i] = __nv_fp8_e4m3(x).__x;
  }
}

template <bool BF16_8>
__global__ void fp8_dequantize_kernel(const uint8_t* values, const float* scale_inv, int64_t rows, int64_t cols,
                                      KOut out) {
  const int64_t bc = (cols + kTile - 1) / kTile;
  if constexpr (BF16_8) {  // cols % 8 == 0: 8 values of one row and one tile
    const int64_t n8 = rows * cols / 8;
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n8; t += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = t * 8, r = i / cols, c = i % cols;
      const float s = scale_inv[(r / kTile) * bc + c / kTile];
      const uint2 raw = reinterpret_cast<const uint2*>(values)[t];
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&raw);
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; ++k) oh[k] = __floats2bfloat162_rn(fp8_to_f(b[2 * k]) * s, fp8_to_f(b[2 * k + 1]) * s);
      reinterpret_cast<uint4*>(out.p)[t] = o;
    }
  } else {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
      const int64_t r = i / cols, c = i % cols;
      st(out, i, fp8_to_f(values[i]) * scale_inv[(r / kTile) * bc + c / kTile]);
    }
  }
}

__global__ void nf4_quantize_kernel(KIn w, int64_t n, Nf4Code code, uint8_t* packed, float* absmax) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = (n + kNf4Block - 1) / kNf4Block;
  const int64_t b = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (b >= nb) return;
  const int64_t i = b * kNf4Block + 2 * lane;  // n is even: i and i + 1 are both in range or both out
  const float x0 = i < n ? ld(w, i) : 0.f, x1 = i < n ? ld(w, i + 1) : 0.f;
  const float amax = warp_max(fmaxf(fabsf(x0), fabsf(x1)));
  if (lane == 0) absmax[b] = amax;
  if (i >= n) return;
  const float inv = amax > 0.f ? 1.f / amax : 0.f;
  packed[i / 2] = static_cast<uint8_t>((nearest(code.v, 16, x0 * inv) << 4) | nearest(code.v, 16, x1 * inv));
}

__global__ void mean_kernel(const float* x, int64_t n, float* mean) {
  __shared__ double scratch[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *mean = static_cast<float>(s / static_cast<double>(n));
}

__global__ void nf4_double_quantize_kernel(const float* absmax, int64_t nb, float offset, const float* code2,
                                           uint8_t* qabsmax, float* absmax2) {
  __shared__ float code[256];
  __shared__ float scratch[32];
  code[threadIdx.x] = code2[threadIdx.x];
  const int64_t j = int64_t(blockIdx.x) * kNf4Block2 + threadIdx.x;
  const float v = j < nb ? absmax[j] - offset : 0.f;
  const float amax = block_max(fabsf(v), scratch);  // its barriers also publish `code`
  if (threadIdx.x == 0) absmax2[blockIdx.x] = amax;
  const float inv = amax > 0.f ? 1.f / amax : 0.f;
  if (j < nb) qabsmax[j] = static_cast<uint8_t>(nearest(code, 256, v * inv));
}

template <bool BF16_8>
__global__ void nf4_dequantize_kernel(const uint8_t* packed, const uint8_t* qabsmax, const float* absmax2,
                                      const float* code2, float offset, Nf4Code code, int64_t n, KOut out) {
  const int64_t n8 = n / 8;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n8; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = t * 8 / kNf4Block;
    const float a = nf4_absmax(qabsmax, absmax2, code2, offset, b);
    const uint32_t raw = reinterpret_cast<const uint32_t*>(packed)[t];
    float v[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t byte = (raw >> (8 * k)) & 0xff;
      v[2 * k] = __fmul_rn(code.v[byte >> 4], a);
      v[2 * k + 1] = __fmul_rn(code.v[byte & 0xf], a);
    }
    if constexpr (BF16_8) {
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; ++k) oh[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
      reinterpret_cast<uint4*>(out.p)[t] = o;
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) st(out, t * 8 + k, v[k]);
    }
  }
  // The tail (n % 8 values, n even) one pair a thread.
  for (int64_t i = n8 * 8 + 2 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x); i < n;
       i += 2 * int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / kNf4Block;
    const float a = nf4_absmax(qabsmax, absmax2, code2, offset, b);
    const uint8_t byte = packed[i / 2];
    st(out, i, __fmul_rn(code.v[byte >> 4], a));
    st(out, i + 1, __fmul_rn(code.v[byte & 0xf], a));
  }
}

int quant_grid(int64_t work, int threads) {
  return static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 65535 * 8));
}

}  // namespace

cudaError_t launch_fp8_quantize(KIn w, int64_t rows, int64_t cols, uint8_t* values, float* scale_inv, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  fp8_quantize_kernel<<<grid, 256, 0, s>>>(w, rows, cols, values, scale_inv);
  return cudaGetLastError();
}

cudaError_t launch_fp8_dequantize(const uint8_t* values, const float* scale_inv, int64_t rows, int64_t cols, KOut out,
                                  cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool fast = out.t == KType::BF16 && cols % 8 == 0 && reinterpret_cast<uintptr_t>(out.p) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(values) % 8 == 0;
  if (fast) fp8_dequantize_kernel<true><<<quant_grid(rows * cols / 8, 256), 256, 0, s>>>(values, scale_inv, rows, cols, out);
  else fp8_dequantize_kernel<false><<<quant_grid(rows * cols, 256), 256, 0, s>>>(values, scale_inv, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t launch_nf4_quantize(KIn w, int64_t n, Nf4Code code, uint8_t* packed, float* absmax, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const int64_t nb = (n + kNf4Block - 1) / kNf4Block;
  nf4_quantize_kernel<<<static_cast<unsigned>((nb * 32 + 255) / 256), 256, 0, s>>>(w, n, code, packed, absmax);
  return cudaGetLastError();
}

cudaError_t launch_mean(const float* x, int64_t n, float* mean, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  mean_kernel<<<1, 1024, 0, s>>>(x, n, mean);
  return cudaGetLastError();
}

cudaError_t launch_nf4_double_quantize(const float* absmax, int64_t nb, float offset, const float* code2,
                                       uint8_t* qabsmax, float* absmax2, cudaStream_t s) {
  if (nb == 0) return cudaSuccess;
  nf4_double_quantize_kernel<<<static_cast<unsigned>((nb + kNf4Block2 - 1) / kNf4Block2), kNf4Block2, 0, s>>>(
      absmax, nb, offset, code2, qabsmax, absmax2);
  return cudaGetLastError();
}

cudaError_t launch_nf4_dequantize(const uint8_t* packed, const uint8_t* qabsmax, const float* absmax2,
                                  const float* code2, float offset, Nf4Code code, int64_t n, KOut out, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool aligned = reinterpret_cast<uintptr_t>(packed) % 4 == 0;
  const bool fast = out.t == KType::BF16 && reinterpret_cast<uintptr_t>(out.p) % 16 == 0;
  const int grid = quant_grid(std::max<int64_t>(n / 8, 1), 256);
  if (!aligned) return cudaErrorMisalignedAddress;
  if (fast) nf4_dequantize_kernel<true><<<grid, 256, 0, s>>>(packed, qabsmax, absmax2, code2, offset, code, n, out);
  else nf4_dequantize_kernel<false><<<grid, 256, 0, s>>>(packed, qabsmax, absmax2, code2, offset, code, n, out);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
