// Row combine of the expert outputs back to tokens and a 3-D axis permutation (expert LoRA B regrouping).
//   combine:  out[t, c] (=) Σ_{j<K} w[t,j]·y[slot_row[t·K+j], c], j in order (fp32 sum, no atomics)
//   permute3: dst[i0, i1, i2] (=) src at the source coordinates (dst axis a = src axis p[a])
// Fast paths, same values (combine: the same fp32 sum in the same order; permute3: copies): combine over bf16 rows of
// 8k values with 16-byte accesses, a warp per token; the two rotations permute3 is used for ((2,0,1) and (1,2,0):
// expert LoRA B [out, r, E] <-> [E, out, r]) as a 2-D transpose through shared memory for 4-byte values. The
// one-element kernels (64-bit index division, a type switch per value, permute3 reading with stride E) took ~90 us
// a call at the 35B-A3B shape.
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

__global__ void combine_kernel(KIn y, const int32_t* slot_row, const float* w, int64_t T, int K, int64_t H, KOut out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, c = i % H;
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
      const int64_t s = t * K + j;
      acc += (w ? w[s] : 1.f) * ld(y, int64_t(slot_row[s]) * H + c);
    }
    st(out, i, acc);
  }
}

__global__ void permute3_kernel(KIn src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2, KOut dst) {
  const int64_t d[3] = {d0, d1, d2};
  const int64_t stride[3] = {d1 * d2, d2, 1};
  const int64_t o1 = d[p1], o2 = d[p2], n = d0 * d1 * d2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i2 = i % o2, i1 = (i / o2) % o1, i0 = i / (o1 * o2);
    st(dst, i, ld(src, i0 * stride[p0] + i1 * stride[p1] + i2 * stride[p2]));
  }
}

constexpr int kCombineWarps = 8;  // tokens per 256-thread block

__global__ void combine_bf16x8_kernel(const void* __restrict__ y, const int32_t* __restrict__ slot_row,
                                      const float* __restrict__ w, int64_t T, int K, int64_t n8, void* __restrict__ out,
                                      bool out_f32) {
  const int64_t t = blockIdx.x * int64_t(kCombineWarps) + (threadIdx.x >> 5);
  if (t >= T) return;
  for (int64_t q = threadIdx.x & 31; q < n8; q += 32) {
    float acc[8] = {};
    for (int j = 0; j < K; ++j) {
      const int64_t s = t * K + j;
      const float wj = w ? w[s] : 1.f;
      const Bf16x8 v = ld8(y, int64_t(slot_row[s]) * n8 + q);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += wj * v.v[e];
    }
    if (out_f32) {
      float4* o = static_cast<float4*>(out) + 2 * (t * n8 + q);
      o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
      Bf16x8 r;
#pragma unroll
      for (int e = 0; e < 8; ++e) r.v[e] = acc[e];
      st8(out, t * n8 + q, r);
    }
  }
}

// dst [C, R] (=) src [R, C]ᵀ for 4-byte values, 32 x 32 tiles (a padded shared tile: no bank conflicts).
constexpr int kTr = 32;
__global__ void transpose4_kernel(const float* __restrict__ src, int64_t R, int64_t C, float* __restrict__ dst) {
  __shared__ float tile[kTr][kTr + 1];
  const int64_t c0 = blockIdx.x * int64_t(kTr), r0 = blockIdx.y * int64_t(kTr);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;  // 32 x 8 threads
  for (int k = ty; k < kTr; k += 8) {
    const int64_t r = r0 + k, c = c0 + tx;
    if (r < R && c < C) tile[k][tx] = src[r * C + c];
  }
  __syncthreads();
  for (int k = ty; k < kTr; k += 8) {
    const int64_t c = c0 + k, r = r0 + tx;
    if (c < C && r < R) dst[c * R + r] = tile[tx][k];
  }
}

}  // namespace

cudaError_t launch_moe_combine(KIn y, const int32_t* slot_row, const float* w, int64_t T, int K, int64_t H, KOut out,
                               cudaStream_t s) {
  if (T * H <= 0) return cudaSuccess;
  const bool out_ok = (out.t == KType::BF16 || out.t == KType::F32) && reinterpret_cast<uintptr_t>(out.p) % 16 == 0;
  if (all_bf16x8(H, y) && out_ok)
    combine_bf16x8_kernel<<<static_cast<unsigned>((T + kCombineWarps - 1) / kCombineWarps), 32 * kCombineWarps, 0, s>>>(
        y.p, slot_row, w, T, K, H / 8, out.p, out.t == KType::F32);
  else
    combine_kernel<<<grid_for(T * H, 256), 256, 0, s>>>(y, slot_row, w, T, K, H, out);
  return cudaGetLastError();
}

cudaError_t launch_permute3(KIn src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2, KOut dst,
                            cudaStream_t s) {
  const int64_t n = d0 * d1 * d2;
  if (n <= 0) return cudaSuccess;
  // (2,0,1) moves the last axis to the front: [d0·d1, d2]ᵀ; (1,2,0) the first to the back: [d0, d1·d2]ᵀ.
  const bool rot_front = p0 == 2 && p1 == 0 && p2 == 1, rot_back = p0 == 1 && p1 == 2 && p2 == 0;
  if ((rot_front || rot_back) && src.t == KType::F32 && dst.t == KType::F32) {
    const int64_t R = rot_front ? d0 * d1 : d0, C = rot_front ? d2 : d1 * d2;
    const dim3 grid(static_cast<unsigned>((C + kTr - 1) / kTr), static_cast<unsigned>((R + kTr - 1) / kTr));
    if (grid.y <= 65535u) {
      transpose4_kernel<<<grid, 256, 0, s>>>(static_cast<const float*>(src.p), R, C, static_cast<float*>(dst.p));
      return cudaGetLastError();
    }
  }
  permute3_kernel<<<grid_for(n, 256), 256, 0, s>>>(src, d0, d1, d2, p0, p1, p2, dst);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
