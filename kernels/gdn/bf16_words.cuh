// bf16 pairs of the 32-byte-swizzled wgmma tiles read as 32-bit words next to a warpgroup's accumulators
// (chunk_grad_wgmma.cu, wy_grad_wgmma.cu; device only).
#pragma once
#include <cstdint>

namespace deltatune::kernels::gdn_words {

// The two bf16 of a word as fp32: a bf16 is the upper half of the fp32 of the same value, so the low element
// is the word shifted up 16 bits and the high one the word with its low 16 bits cleared. The values of
// __bfloat1622float2 in two integer instructions (ptxas moves the high half down with a PRMT and shifts it
// back up: three).
__device__ __forceinline__ float2 bf16x2_f2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 ld_bf16x2(const unsigned char* p) {
  return bf16x2_f2(*reinterpret_cast<const uint32_t*>(p));
}

// Byte offsets in a 64-row tile of 16-column blocks of 64 rows x 32 bytes with the two 16-byte halves of rows
// 4..7 (mod 8) swapped (wgmma_tiles.cuh's sw<64>) of the pairs an accumulator thread holds: rows i0 (= m0 +
// lane/4) + 8hf, columns n0 + 8nb + 2t4 and + 1 (n0 a multiple of 16). pair_base is the (nb 0, hf 0) pair;
// an odd nb flips the swizzle bit (bit 4: i0·32 and 4·t4 < 16 leave it to (i0/4) & 1), nb/2 is the 16-column
// block, hf 8 rows: sw<64>(i0 + 8hf, n0 + 8nb + 2t4) = pair_at(pair_base(i0, t4, n0), nb, hf).
__device__ __forceinline__ uint32_t pair_base(int i0, int t4, int n0) {
  return uint32_t((n0 >> 4) * 2048 + i0 * 32 + (((i0 >> 2) & 1) << 4) + 4 * t4);
}
__device__ __forceinline__ uint32_t pair_at(uint32_t base, int nb, int hf) {
  return ((nb & 1) ? (base ^ 16u) : base) + uint32_t((nb >> 1) * 2048 + hf * 256);
}

}  // namespace deltatune::kernels::gdn_words
