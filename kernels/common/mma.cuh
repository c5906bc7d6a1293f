// Warp-level tensor-core helpers for the attention and GDN kernels (device only): bf16 mma.sync m16n8k16 with fp32
// accumulators, ldmatrix fragment loads from shared memory and cp.async global -> shared copies.
//
// Fragment layouts relied on (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16; lane = 0..31,
// g = lane / 4 (groupID), t = lane % 4 (thread in group); each .b32 register holds two bf16, the element
// with the lower column/k index in the low 16 bits):
//   A (16x16, row major) a0: (row g,   k 2t..2t+1)      a1: (row g+8, k 2t..2t+1)
//                        a2: (row g,   k 2t+8..2t+9)    a3: (row g+8, k 2t+8..2t+9)
//   B (16x8, k x n)      b0: (k 2t..2t+1,   col g)      b1: (k 2t+8..2t+9, col g)
//   C/D (16x8, fp32)     c0, c1: (row g, col 2t, 2t+1)  c2, c3: (row g+8, col 2t, 2t+1)
// ldmatrix.m8n8.x4: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i (16 bytes each); register
// ri of every lane receives from matrix i the pair (row lane/4, cols 2(lane%4), +1) -- exactly an A/B/C
// style pair. With .trans it receives (rows 2(lane%4), +1 at col lane/4), i.e. the transposed pair.
// Consequences used by the kernels (X row-major in shared memory, rows = the first index):
//   - A fragment of X[r0.., k0..] (16x16): lane gives &X[r0 + (lane & 15)][k0 + (lane >> 4) * 8];
//     r0..r3 = a0..a3.
//   - B fragments for C = A·Yᵀ with Y[n][k] row-major (two n-blocks of 8): lane gives
//     &Y[n0 + (lane & 7) + ((lane >> 4) << 3)][k0 + ((lane >> 3) & 1) * 8]; (r0, r1) = (b0, b1) of n-block
//     n0, (r2, r3) of n-block n0 + 8.
//   - B fragments for C = A·Y with Y[k][n] row-major (.trans, two n-blocks): lane gives
//     &Y[k0 + (lane & 15)][n0 + (lane >> 4) * 8]; (r0, r1) = (b0, b1) of n-block n0, (r2, r3) of n0 + 8.
//   - The C fragments of two adjacent 8-column blocks (cols 16c..16c+15) of a 16-row product are the
//     A fragment of its k-chunk c once packed to bf16: a0 = (C[2c].c0, c1), a1 = (C[2c].c2, c3),
//     a2 = (C[2c+1].c0, c1), a3 = (C[2c+1].c2, c3). This is how P and dS feed the next product without a
//     trip through shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#ifdef DT_ATTN_EMU
#include "emu/attention/emu_mma.h"  // the primitives below emulated on the host (dev/emu/attention/attention_emu.cpp)
#else
namespace deltatune::kernels::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte copy global -> shared; !valid writes 16 zero bytes and reads nothing (src must still be a
// mapped address; callers pass the tensor base).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// As cp_async16, through L1 (.ca): for copies that fetch each sector in two 16-byte halves from different
// instructions (the second finds it in L1 instead of reading L2 again).
__device__ __forceinline__ void cp_async16_ca(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// 4-byte copy global -> shared (scattered scalars); !valid writes zeros.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c (+)= a·b for one 16x8x16 tile.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 register, `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A 16-byte piece of eight bf16 times f, then times g (two products, in that order), rounded back to bf16.
__device__ __forceinline__ uint4 scale_bf16x8(uint4 u, float f, float g) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  uint32_t o[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[e]));
    o[e] = pack_bf16(a.x * f * g, a.y * f * g);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

}  // namespace deltatune::kernels::mma
#endif  // DT_ATTN_EMU

namespace deltatune::kernels::mma {

// A fragment of k-chunk c from the fp32 C fragments of n-blocks 2c and 2c+1 (see the header comment).
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// Copies rows t0 .. t0+ROWS-1 of one head (HD bf16 each; global row t at src + (t·heads + head)·HD) into
// dst[r][0..HD) with row stride LD elements; rows t >= t_end become zeros. NT threads take part.
template <int ROWS, int HD, int LD, int NT>
__device__ __forceinline__ void load_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t t0, int64_t t_end,
                                          int64_t heads, int64_t head) {
  constexpr int CPR = HD / 8;  // 16-byte chunks per row
  static_assert((ROWS * CPR) % NT == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int i = 0; i < ROWS * CPR / NT; ++i) {
    const int c = threadIdx.x + i * NT;
    const int r = c / CPR, col = (c % CPR) * 8;
    const int64_t t = t0 + r;
    const bool ok = t < t_end;
    const __nv_bfloat16* g = ok ? src + (t * heads + head) * HD + col : src;
    cp_async16(smem_addr(dst + r * LD + col), g, ok);
  }
}

}  // namespace deltatune::kernels::mma
