// The mma.cuh API emulated on the host from the PTX ISA definitions (independent of the kernels' own
// address math): ldmatrix returns per lane the pair (row lane/4, cols 2(lane%4), +1) of each 8x8 matrix
// whose row addresses lanes 8i..8i+7 give (.trans: the pair (rows 2(lane%4), +1, col lane/4)); mma
// m16n8k16 gathers the A/B fragments of all lanes by the documented layouts and returns each lane's C.
#pragma once
#include <cstdio>
#include <cstdlib>

#include "emu/attention/emu_rt.h"

namespace deltatune::kernels::mma {

inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - emu::ctx.block->smem);
}
inline unsigned char* smem_ptr(uint32_t a, uint32_t bytes = 16) {
  if (a + bytes > emu::ctx.block->smem_size) {
    std::fprintf(stderr, "shared memory access out of range: %u of %zu\n", a, emu::ctx.block->smem_size);
    std::abort();
  }
  return emu::ctx.block->smem + a;
}

inline void cp_async16(uint32_t dst, const void* src, bool valid) {
  if (dst % 16) { std::fprintf(stderr, "cp.async dst not 16-byte aligned\n"); std::abort(); }
  if (valid) std::memcpy(smem_ptr(dst), src, 16);
  else std::memset(smem_ptr(dst), 0, 16);
}
inline void cp_async4(uint32_t dst, const void* src, bool valid) {
  if (dst % 4) { std::fprintf(stderr, "cp.async dst not 4-byte aligned\n"); std::abort(); }
  if (valid) std::memcpy(smem_ptr(dst, 4), src, 4);
  else std::memset(smem_ptr(dst, 4), 0, 4);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}

inline uint16_t bf16_bits(float x) {
  __nv_bfloat16 b = __float2bfloat16_rn(x);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}
inline float bits_bf16(uint16_t u) {
  uint32_t w = uint32_t(u) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline uint16_t ld16(uint32_t addr) {
  uint16_t u;
  std::memcpy(&u, smem_ptr(addr), 2);
  return u;
}

inline void ldsm_common(uint32_t (&r)[4], uint32_t addr, bool trans) {
  const int w = emu::warp(), l = emu::lane();
  if (addr % 16) { std::fprintf(stderr, "ldmatrix row address not 16-byte aligned\n"); std::abort(); }
  emu::slot(w, l)[0] = addr;
  emu::warp_sync();
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {
      const uint32_t row = emu::slot(w, 8 * i + l / 4)[0];
      lo = ld16(row + 2 * (2 * (l % 4)));
      hi = ld16(row + 2 * (2 * (l % 4) + 1));
    } else {
      lo = ld16(emu::slot(w, 8 * i + 2 * (l % 4))[0] + 2 * (l / 4));
      hi = ld16(emu::slot(w, 8 * i + 2 * (l % 4) + 1)[0] + 2 * (l / 4));
    }
    r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
  emu::warp_sync();
}
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { ldsm_common(r, addr, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { ldsm_common(r, addr, true); }

inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = emu::warp(), l = emu::lane();
  uint32_t* s = emu::slot(w, l);
  s[0] = a[0], s[1] = a[1], s[2] = a[2], s[3] = a[3], s[4] = b0, s[5] = b1;
  emu::warp_sync();
  auto A = [&](int row, int k) {  // owner lane (row%8)*4 + (k%8)/2, register (row>=8) + 2(k>=8), half k%2
    const uint32_t reg = emu::slot(w, (row % 8) * 4 + (k % 8) / 2)[(row >= 8) + 2 * (k >= 8)];
    return bits_bf16(uint16_t(k % 2 ? reg >> 16 : reg & 0xffff));
  };
  auto B = [&](int k, int n) {  // owner lane n*4 + (k%8)/2, register b(k>=8), half k%2
    const uint32_t reg = emu::slot(w, n * 4 + (k % 8) / 2)[4 + (k >= 8)];
    return bits_bf16(uint16_t(k % 2 ? reg >> 16 : reg & 0xffff));
  };
  const int g = l / 4, t = l % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2) * 8, col = 2 * t + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    out[e] = acc;
  }
  emu::warp_sync();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

inline uint32_t pack_bf16(float lo, float hi) { return uint32_t(bf16_bits(lo)) | (uint32_t(bf16_bits(hi)) << 16); }

}  // namespace deltatune::kernels::mma
