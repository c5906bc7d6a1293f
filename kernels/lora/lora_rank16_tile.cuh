// The rank-16 tile shared by the LoRA kernels that form a rank-r term on the fly (lora_up.cu, lora_swiglu.cu):
// a block of 128 tokens x 128 columns with its [*, 16] operand rows in shared memory; each warp forms 16 tokens x
// 64 columns per pass, one mma k-step per 16 x 8 block, and sends them through a per-warp fp32 staging tile so that
// every global access is a 16-byte row piece of 8 columns.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/mma.cuh"

namespace deltatune::kernels::lora_rank16 {

using bf16 = __nv_bfloat16;
constexpr int kR = 16;
constexpr int kTileT = 128, kTileN = 128, kHalf = 64;  // tokens x columns per block; columns per pass
constexpr int kThreads = 256;                         // 8 warps of 16 tokens
constexpr int kLdA = kR + 8;                          // padded [*, 16] rows (ldmatrix rows on distinct banks)
constexpr int kLdS = kHalf + 8;                       // padded fp32 staging row

// rows [r0, r0 + kRows) of a [rows, 16] bf16 matrix (row stride ld) into dst (row stride kLdA); rows past `rows`
// become zeros.
template <int kRows = 128>
__device__ __forceinline__ void load_r16(bf16* dst, const bf16* src, int64_t ld, int64_t r0, int64_t rows) {
  for (int idx = threadIdx.x; idx < kRows * 2; idx += kThreads) {
    const int r = idx / 2, q = idx % 2;
    const bool ok = r0 + r < rows;
    mma::cp_async16(mma::smem_addr(&dst[r * kLdA + 8 * q]), ok ? src + (r0 + r) * ld + 8 * q : src, ok);
  }
}

// acc (=) u rows of this warp · B columns [c0, c0 + kN) of the tile (B tile as [n][k] rows): acc[j] is the 16 x 8
// block of columns c0 + 8·j.
template <int kN = kHalf>
__device__ __forceinline__ void rank_r_nk(float (&acc)[kN / 8][4], const uint32_t (&a)[4], const bf16* bs, int c0,
                                          int lane) {
#pragma unroll
  for (int p = 0; p < kN / 16; ++p) {
    uint32_t b[4];
    mma::ldsm_x4(b, mma::smem_addr(&bs[(c0 + 16 * p + (lane & 7) + ((lane >> 4) << 3)) * kLdA + ((lane >> 3) & 1) * 8]));
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[2 * p][e] = acc[2 * p + 1][e] = 0.f;
    mma::mma16816(acc[2 * p], a, b[0], b[1]);
    mma::mma16816(acc[2 * p + 1], a, b[2], b[3]);
  }
}

// Rows g (half 0) or g + 8 (half 1) of the warp's 16 x 64 accumulators, times alpha, through the staging tile s;
// then out[pass][0..8) = row pass·4 + lane/8, columns 8·(lane % 8) .. + 8 of those 8 rows.
__device__ __forceinline__ void stage_rows(const float (&acc)[kHalf / 8][4], float alpha, int half, float* s, int lane,
                                           float (&out)[2][8]) {
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int nb = 0; nb < kHalf / 8; ++nb)
    *reinterpret_cast<float2*>(&s[g * kLdS + nb * 8 + 2 * t4]) =
        make_float2(alpha * acc[nb][2 * half], alpha * acc[nb][2 * half + 1]);
  __syncwarp();
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int row = pass * 4 + lane / 8, piece = lane % 8;
    const float4 lo = *reinterpret_cast<const float4*>(&s[row * kLdS + 8 * piece]);
    const float4 hi = *reinterpret_cast<const float4*>(&s[row * kLdS + 8 * piece + 4]);
    out[pass][0] = lo.x, out[pass][1] = lo.y, out[pass][2] = lo.z, out[pass][3] = lo.w;
    out[pass][4] = hi.x, out[pass][5] = hi.y, out[pass][6] = hi.z, out[pass][7] = hi.w;
  }
  __syncwarp();
}

}  // namespace deltatune::kernels::lora_rank16
