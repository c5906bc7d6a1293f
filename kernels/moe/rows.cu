// Row gather/scatter helpers for MoE dispatch and the embedding lookup, fp32 math:
//   gather:      dst[i] (=) src[rows[i]]            (embedding: rows = token ids)
//   scatter_add: dst[rows[i]] (+=) scale[i]·src[i]  (atomicAdd: rows may repeat; BF16 dst uses bf16 atomics)
//   row_dot:     out[i] (=) Σ_c a[i,c]·b[i,c]
//   scale_rows:  y[i] (=) x[i]·s[i]
// Rows whose bytes are a multiple of 16 (bf16 rows of 8k values: the MoE layer's hidden and expert rows) take
// warp-per-row kernels with 16-byte accesses: the one-element kernels (64-bit index division and a type switch
// per value) moved the 35B-A3B layer's [32768, 2048] gathers at ~1 TB/s. Same arithmetic per value: same bits.
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

__global__ void gather_kernel(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / H, c = e % H;
    const int64_t r = rows[i];
    st(dst, e, (r >= 0 && r < src_rows) ? ld(src, r * H + c) : 0.f);
  }
}

__global__ void scatter_add_kernel(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H, KOut dst,
                                   int64_t dst_rows) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / H, c = e % H;
    const int64_t r = rows[i];
    if (r < 0 || r >= dst_rows) continue;
    const float val = ld(src, e) * (scale ? scale[i] : 1.f);
    const int64_t o = r * H + c;
    switch (dst.t) {
      case KType::BF16: atomicAdd(static_cast<__nv_bfloat16*>(dst.p) + o, __float2bfloat16_rn(val)); break;
      case KType::F16: atomicAdd(static_cast<__half*>(dst.p) + o, __float2half_rn(val)); break;
      default: atomicAdd(static_cast<float*>(dst.p) + o, val); break;
    }
  }
}

// One warp per row.
__global__ void row_dot_kernel(KIn a, KIn b, int64_t n, int64_t H, float* out) {
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (i >= n) return;
  float acc = 0.f;
  for (int64_t c = lane; c < H; c += 32) acc += ld(a, i * H + c) * ld(b, i * H + c);
  acc = warp_sum(acc);
  if (lane == 0) out[i] = acc;
}

__global__ void scale_rows_kernel(KIn x, const float* sc, int64_t n, int64_t H, KOut y) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x)
    st(y, e, ld(x, e) * sc[e / H]);
}

constexpr int kRowWarps = 8;  // rows per 256-thread block in the warp-per-row kernels

// Row i of n (one warp each) and the block count for n rows.
__device__ __forceinline__ int64_t warp_row() { return blockIdx.x * int64_t(kRowWarps) + (threadIdx.x >> 5); }
unsigned row_blocks(int64_t n) { return static_cast<unsigned>((n + kRowWarps - 1) / kRowWarps); }

// A row of w16 16-byte pieces copied as raw bytes (any element type; src and dst the same type).
__global__ void gather_rows16_kernel(const uint4* __restrict__ src, int64_t src_rows, const int32_t* __restrict__ rows,
                                     int64_t n, int64_t w16, uint4* __restrict__ dst) {
  const int64_t i = warp_row();
  if (i >= n) return;
  const int64_t r = rows[i];
  const bool ok = r >= 0 && r < src_rows;
  const uint4* s = src + (ok ? r : 0) * w16;
  uint4* d = dst + i * w16;
#pragma unroll 4
  for (int64_t q = threadIdx.x & 31; q < w16; q += 32) d[q] = ok ? s[q] : make_uint4(0, 0, 0, 0);
}

__global__ void scale_rows_bf16x8_kernel(const void* __restrict__ x, const float* __restrict__ sc, int64_t n,
                                         int64_t n8, void* __restrict__ y) {
  const int64_t i = warp_row();
  if (i >= n) return;
  const float s = sc[i];
#pragma unroll 4
  for (int64_t q = threadIdx.x & 31; q < n8; q += 32) {
    Bf16x8 v = ld8(x, i * n8 + q);
#pragma unroll
    for (int e = 0; e < 8; ++e) v.v[e] *= s;
    st8(y, i * n8 + q, v);
  }
}

// The one-element kernel's sum is over c = lane, lane + 32, ... in order; here a lane holds c = 8q + e for its
// pieces q, so the partial sums differ: F32 result within rounding of it (tested at 1e-10 like the old kernel
// against the CPU).
__global__ void row_dot_bf16x8_kernel(const void* __restrict__ a, const void* __restrict__ b, int64_t n, int64_t n8,
                                      float* __restrict__ out) {
  const int64_t i = warp_row();
  if (i >= n) return;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t q = threadIdx.x & 31; q < n8; q += 32) {
    const Bf16x8 va = ld8(a, i * n8 + q), vb = ld8(b, i * n8 + q);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc += va.v[e] * vb.v[e];
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) out[i] = acc;
}

int kbytes(KType t) { return t == KType::F32 ? 4 : 2; }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t launch_gather_rows(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst,
                               cudaStream_t s) {
  if (n * H <= 0) return cudaSuccess;
  const int64_t bytes = H * kbytes(src.t);
  if (src.t == dst.t && bytes % 16 == 0 && aligned16(src.p) && aligned16(dst.p))
    gather_rows16_kernel<<<row_blocks(n), 32 * kRowWarps, 0, s>>>(static_cast<const uint4*>(src.p), src_rows, rows, n,
                                                                  bytes / 16, static_cast<uint4*>(dst.p));
  else
    gather_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(src, src_rows, rows, n, H, dst);
  return cudaGetLastError();
}
cudaError_t launch_scatter_add_rows(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H, KOut dst,
                                    int64_t dst_rows, cudaStream_t s) {
  if (n * H > 0) scatter_add_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(src, rows, scale, n, H, dst, dst_rows);
  return cudaGetLastError();
}
cudaError_t launch_row_dot(KIn a, KIn b, int64_t n, int64_t H, float* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (all_bf16x8(H, a, b))
    row_dot_bf16x8_kernel<<<row_blocks(n), 32 * kRowWarps, 0, s>>>(a.p, b.p, n, H / 8, out);
  else
    row_dot_kernel<<<grid_for(n * 32, 256, int64_t(1) << 30), 256, 0, s>>>(a, b, n, H, out);
  return cudaGetLastError();
}
cudaError_t launch_scale_rows(KIn x, const float* sc, int64_t n, int64_t H, KOut y, cudaStream_t s) {
  if (n * H <= 0) return cudaSuccess;
  if (all_bf16x8(H, x, y))
    scale_rows_bf16x8_kernel<<<row_blocks(n), 32 * kRowWarps, 0, s>>>(x.p, sc, n, H / 8, y.p);
  else
    scale_rows_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(x, sc, n, H, y);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
