// Device-side helpers shared by all kernels: typed load/store through KIn/KOut (fp32 in registers),
// warp and block reductions, activation functions. Included by .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

__device__ __forceinline__ float ld(KIn a, int64_t i) {
  switch (a.t) {
    case KType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(a.p)[i]);
    case KType::F16: return __half2float(static_cast<const __half*>(a.p)[i]);
    default: return static_cast<const float*>(a.p)[i];
  }
}
__device__ __forceinline__ float ld(KOut a, int64_t i) {
  return ld(KIn{a.p, a.t}, i);
}
__device__ __forceinline__ void st(KOut a, int64_t i, float v) {
  switch (a.t) {
    case KType::BF16: static_cast<__nv_bfloat16*>(a.p)[i] = __float2bfloat16_rn(v); break;
    case KType::F16: static_cast<__half*>(a.p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(a.p)[i] = v; break;
  }
}
// a[i], a[i+1] (any storage type, i even); one store of the pair when its address allows (an output may be
// a view at any element offset). ALIGNED: the caller knows that it does (a.p aligned to the pair's size).
template <bool ALIGNED = false>
__device__ __forceinline__ void st_pair(KOut a, int64_t i, float x, float y) {
  const size_t bytes = a.t == KType::F32 ? 8 : 4;
  if (!ALIGNED && reinterpret_cast<uintptr_t>(static_cast<char*>(a.p) + i * (bytes / 2)) % bytes != 0) {
    st(a, i, x);
    st(a, i + 1, y);
    return;
  }
  switch (a.t) {
    case KType::BF16:
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.p) + i) = __floats2bfloat162_rn(x, y);
      break;
    case KType::F16:
      *reinterpret_cast<__half2*>(static_cast<__half*>(a.p) + i) = __floats2half2_rn(x, y);
      break;
    default:
      *reinterpret_cast<float2*>(static_cast<float*>(a.p) + i) = make_float2(x, y);
      break;
  }
}

// Templated element access for kernels specialised on one storage type.
template <class T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x * sigmoidf_(x); }
// d silu / dx = σ(x)·(1 + x·(1 − σ(x)))
__device__ __forceinline__ float dsiluf_(float x) {
  const float s = sigmoidf_(x);
  return s * (1.f + x * (1.f - s));
}
// torch.nn.functional.softplus with beta 1, threshold 20.
__device__ __forceinline__ float softplusf_(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values; the call begins and ends with a barrier so it may be called back to back.
template <class T> __device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : T(0);
  r = warp_sum(r);
  return r;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

// Sequence index of token t from cu_seqlens [nseq+1] (binary search; nseq is small).
__device__ __forceinline__ int seq_of_token(const int32_t* cu, int nseq, int64_t t) {
  int lo = 0, hi = nseq - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

}  // namespace deltatune::kernels
