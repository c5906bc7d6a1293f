// The common/wgmma.cuh API (and attention_wgmma.cuh's register-A product and named barriers) emulated on the
// host from the PTX ISA definitions, for the Hopper attention kernels (attention_{fwd,dq,dkdv}_wgmma.cu):
// a wgmma runs when it is issued (fence / commit / wait do nothing), each thread forming its own accumulators
// (warp w of the warpgroup: rows 16w + lane/4 (+8); register 4j + 2h + e: row +8h, column 8j + 2(lane%4) + e)
// from shared memory read through the descriptor (no-swizzle core matrices: 8 rows of 16 bytes; LBO between
// core matrices adjacent in K, SBO adjacent in M / N, for both majors) or, for a register A, from the four
// warps' mma.m16n8k16 A fragments gathered across the warpgroup. Not part of the build (attention_emu.cpp).
#pragma once
#include <cstdio>
#include <cstdlib>

#include "emu/attention/emu_mma.h"

// The emulation is the sm_90a target of the kernels (their bodies are compiled under this macro).
#ifndef __CUDA_ARCH_FEAT_SM90_ALL
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#endif

namespace deltatune::kernels::wgmma {

template <int K>
constexpr uint32_t core_offset(int r, int k) {
  return uint32_t((r >> 3) * (K * 16) + (k >> 3) * 128 + (r & 7) * 16 + (k & 7) * 2);
}
inline uint64_t desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}
inline void fence() {}
inline void commit() {}
template <int N> inline void wait() {}
inline void fence_proxy_async() {}
template <int N> inline void fence_operands(float (&)[N]) {}

// Element (m, k) of a 64 x 16 A, or (k, n) of a 16 x N B (mn = m or n), through descriptor d; mn_major: the
// operand's M (N) index is the contiguous one inside a core matrix.
inline float operand(uint64_t d, int mn, int k, bool mn_major) {
  const uint32_t base = uint32_t(d & 0x3FFF) << 4, lbo = uint32_t((d >> 16) & 0x3FFF) << 4,
                 sbo = uint32_t((d >> 32) & 0x3FFF) << 4;
  const uint32_t core = base + (k >> 3) * lbo + (mn >> 3) * sbo;
  const uint32_t a = mn_major ? core + (k & 7) * 16 + (mn & 7) * 2 : core + (mn & 7) * 16 + (k & 7) * 2;
  if (a % 2 || a + 2 > emu::ctx.block->smem_size) {
    std::fprintf(stderr, "wgmma operand address %u misaligned or past %zu\n", a, emu::ctx.block->smem_size);
    std::abort();
  }
  uint16_t u;
  std::memcpy(&u, emu::ctx.block->smem + a, 2);
  return mma::bits_bf16(u);
}

inline int wg_row(int i) { return 16 * (emu::warp() & 3) + emu::lane() / 4 + 8 * ((i >> 1) & 1); }
inline int wg_col(int i) { return 8 * (i >> 2) + 2 * (emu::lane() % 4) + (i & 1); }

// d (+)= A·B for m64nNk16 with A from shared memory (descriptor a).
template <int R>
inline void mma_ss(float (&d)[R], uint64_t a, uint64_t b, bool accumulate, bool ta, bool tb) {
  for (int i = 0; i < R; ++i) {
    const int m = wg_row(i), n = wg_col(i);
    float acc = accumulate ? d[i] : 0.f;
    for (int k = 0; k < 16; ++k) acc += operand(a, m, k, ta) * operand(b, n, k, tb);
    d[i] = acc;
  }
}

template <int TA, int TB = 0> inline void mma_m64n16(float (&d)[8], uint64_t a, uint64_t b, bool acc) {
  mma_ss(d, a, b, acc, TA, TB);
}
template <int TA, int TB = 0> inline void mma_m64n32(float (&d)[16], uint64_t a, uint64_t b, bool acc) {
  mma_ss(d, a, b, acc, TA, TB);
}
template <int TA, int TB = 0> inline void mma_m64n64(float (&d)[32], uint64_t a, uint64_t b, bool acc) {
  mma_ss(d, a, b, acc, TA, TB);
}
template <int TA, int TB = 0> inline void mma_m64n256(float (&d)[128], uint64_t a, uint64_t b, bool acc) {
  mma_ss(d, a, b, acc, TA, TB);
}
template <int TA, int TB, int R> inline void mma_m64n(float (&d)[R], uint64_t a, uint64_t b, bool acc) {
  mma_ss(d, a, b, acc, TA, TB);
}

// d += A·B for m64nNk16 with A in registers: each warp's mma.m16n8k16 A fragment of its 16 rows (a0: row g,
// k 2t..2t+1; a1: row g+8; a2: k +8; a3: both), gathered across the warpgroup.
template <int R>
inline void mma_rs(float (&d)[R], const uint32_t (&a)[4], uint64_t b, bool tb) {
  const int w = emu::warp(), l = emu::lane(), w0 = w & ~3;
  uint32_t* s = emu::slot(w, l);
  for (int i = 0; i < 4; ++i) s[i] = a[i];
  emu::wg_sync();
  auto A = [&](int m, int k) {
    const uint32_t reg = emu::slot(w0 + m / 16, (m % 8) * 4 + (k % 8) / 2)[(m % 16 >= 8) + 2 * (k >= 8)];
    return mma::bits_bf16(uint16_t(k % 2 ? reg >> 16 : reg & 0xffff));
  };
  float out[R];
  for (int i = 0; i < R; ++i) {
    const int m = wg_row(i), n = wg_col(i);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A(m, k) * operand(b, n, k, tb);
    out[i] = acc;
  }
  emu::wg_sync();
  for (int i = 0; i < R; ++i) d[i] = out[i];
}

}  // namespace deltatune::kernels::wgmma
