// Tile copies, layouts and accumulator stores shared by the GDN kernels on wgmma (chunk_scan_wgmma.cu,
// chunk_dscan_wgmma.cu, chunk_grad_wgmma.cu, odd_states_wgmma.cu; device only).
#pragma once
#include <cstdint>

#include "common/mma.cuh"
#include "common/wgmma.cuh"

namespace deltatune::kernels::gdn_wgmma {

__device__ __forceinline__ uint32_t pack(float a, float b) {
  return mma::pack_bf16(a, b);
}

// Piece p (16 bytes: row r, 8-element column group kc) of a tile with KC pieces a row (a multiple of 4), in
// the order of copies between row-major global rows and the tiles: a warp takes 8 rows x 4 pieces, each
// quarter warp 4 rows x 2 adjacent pieces (whole 32-byte sectors in global memory; at most 2-way bank
// conflicts in the tiles, whose row pieces lie 128 bytes or a column group apart).
template <int KC>
__device__ __forceinline__ void quad_piece(int p, int& r, int& kc) {
  static_assert(KC % 4 == 0, "pieces in quads");
  const int l = p & 31, wp = p >> 5;  // wp: (row group, piece quad)
  r = 8 * (wp / (KC / 4)) + ((l >> 1) & 3) + 4 * (l >> 4);
  kc = 4 * (wp % (KC / 4)) + (l & 1) + 2 * ((l >> 3) & 1);
}

// bf16 pairs of a warpgroup's 64 accumulator rows (r0 + 16wq + lane/4 (+8), wq its warp) and R/2 columns by
// stmatrix, four 8x8 matrices (n-blocks j, row halves h) per call. TRANS: into a core-layout tile whose rows
// are the accumulators' columns (tile row c at (c/8)·RG + ((r0 + 16wq + 8h)/8)·128 + (c%8)·16); else tile row
// (accumulator row) r0 + 16wq + 8h + i at ((r0 + 16wq + 8h)/8)·RG + j·CG + i·RS.
template <bool TRANS, int R>
__device__ __forceinline__ void store_acc(uint32_t tile, int RG, int CG, int RS, int r0,
                                          const float (&x)[R]) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, i = lane >> 3, r = lane & 7;
#pragma unroll
  for (int jj = 0; jj < R / 8; ++jj) {
    const int j = 2 * jj + (i >> 1), hf = i & 1, rb = r0 + 16 * wq + 8 * hf;
    const uint32_t a = pack(x[8 * jj], x[8 * jj + 1]), b = pack(x[8 * jj + 2], x[8 * jj + 3]);
    const uint32_t c = pack(x[8 * jj + 4], x[8 * jj + 5]), d = pack(x[8 * jj + 6], x[8 * jj + 7]);
    if constexpr (TRANS)
      wgmma::stmatrix_x4_trans(tile + j * RG + (rb >> 3) * 128 + r * 16, a, b, c, d);
    else
      wgmma::stmatrix_x4(tile + (rb >> 3) * RG + j * CG + r * RS, a, b, c, d);
  }
}

// Byte offset of element (r, c) in a tile of R rows: 16-column blocks of R rows x 32 bytes, the two 16-byte
// halves of rows 4..7 (mod 8) swapped (TMA's 32-byte swizzle; wgmma swizzle mode 3).
template <int R>
__device__ __forceinline__ uint32_t sw(int r, int c) {
  return uint32_t((c >> 4) * (R * 32) + r * 32 + ((((c >> 3) ^ (r >> 2)) & 1) << 4) + (c & 7) * 2);
}
// Descriptors of 32-byte-swizzled operands: K-major (rows m or n 32 bytes apart, 8-row groups SBO = 256; LBO
// unused) and MN-major (k rows 32 bytes apart, 8-row groups SBO = 256, 16-column blocks LBO apart).
__device__ __forceinline__ uint64_t desc_k(uint32_t addr) {
  return wgmma::desc(addr, 16, 256) | (uint64_t(3) << 62);
}
__device__ __forceinline__ uint64_t desc_mn(uint32_t addr, uint32_t block_bytes) {
  return wgmma::desc(addr, block_bytes, 256) | (uint64_t(3) << 62);
}

// A descriptor of the tile `off` bytes further (the 14-bit address field does not overflow: shared memory
// addresses are below 2^18).
__device__ __forceinline__ uint64_t desc_at(uint64_t d, uint32_t off) {
  return (d & ~uint64_t(0xffffffffu)) | uint32_t(uint32_t(d) + (off >> 4));
}

// d (+)= the sum over STEPS k steps of 16 of A·B (m64nN, N by d's size), the operands step_a / step_b bytes
// further at each step; the first step overwrites d unless acc.
template <int STEPS, int TA, int TB, int R>
__device__ __forceinline__ void mma_steps(float (&d)[R], uint64_t a, uint32_t step_a, uint64_t b,
                                          uint32_t step_b, bool acc = false) {
#pragma unroll
  for (int s = 0; s < STEPS; ++s)
    wgmma::mma_m64n<TA, TB>(d, desc_at(a, step_a * s), desc_at(b, step_b * s), acc || s > 0);
}

// The wgmma accumulators as the mma.sync m16n8 fragments store_tile_bf16 takes (the same register layout).
__device__ __forceinline__ const float (&as_frags(const float (&x)[32]))[8][4] {
  return *reinterpret_cast<const float(*)[8][4]>(&x);
}

}  // namespace deltatune::kernels::gdn_wgmma
