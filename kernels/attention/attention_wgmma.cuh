// wgmma pieces of the Hopper attention kernels (attention_fwd_wgmma.cu, attention_dq_wgmma.cu; sm_90a, device
// only): the register-A m64n64k16 product, descriptor offsets and core-layout tile copies.
#pragma once
#include <cstdint>

#include "common/mma.cuh"
#include "common/wgmma.cuh"

namespace deltatune::kernels::attn_wgmma {

using bf16 = __nv_bfloat16;

// d += A·B, m64n64k16, A (bf16 pairs, the mma.m16n8k16 A fragment of the warp's 16 rows) from registers, B
// from shared memory (descriptor b); TB: B is MN-major.
template <int TB>
__device__ __forceinline__ void mma_rs_m64n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TB), "r"(1));
}

// The descriptor of the operand `off` bytes further (shared addresses are below 2^18: no carry out of the
// 14-bit address field).
__device__ __forceinline__ uint64_t at(uint64_t d, uint32_t off) { return d + (off >> 4); }

// Rows t0 .. t0+ROWS-1 of one head (HD bf16 each; global row t at src + (t·heads + head)·HD) into a core-layout
// tile at dst (wgmma::core_offset<HD>); rows t >= t_end become zeros. A warp copies 8 rows x 4 adjacent
// 16-byte pieces (whole 32-byte sectors; a quarter warp 4 rows x 2 pieces: at most 2-way bank conflicts).
template <int HD, int ROWS, int NT>
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t t0, int64_t t_end,
                                          int64_t heads, int64_t head) {
  constexpr int KC = HD / 8;  // 16-byte pieces a row
  static_assert(KC % 4 == 0 && ROWS % 8 == 0 && (ROWS * KC) % NT == 0, "pieces in quads, split evenly");
#pragma unroll 4
  for (int i = 0; i < ROWS * KC / NT; ++i) {
    const int p = threadIdx.x + i * NT, l = p & 31, wp = p >> 5;
    const int r = 8 * (wp / (KC / 4)) + ((l >> 1) & 3) + 4 * (l >> 4);
    const int kc = 4 * (wp % (KC / 4)) + (l & 1) + 2 * ((l >> 3) & 1);
    const int64_t t = t0 + r;
    const bool ok = t < t_end;
    mma::cp_async16(dst + wgmma::core_offset<HD>(r, 8 * kc), ok ? src + (t * heads + head) * HD + 8 * kc : src,
                    ok);
  }
}

}  // namespace deltatune::kernels::attn_wgmma
