// wgmma pieces of the Hopper attention kernels (attention_fwd_wgmma.cu, attention_dq_wgmma.cu,
// attention_dkdv_wgmma.cu; sm_90a, device only): the register-A m64n64k16 / m64n256k16 products, the product
// of a score tile (P or dS in accumulators) with a shared-memory tile, named barriers, descriptor offsets,
// core-layout tile copies, and the K/V tiles shared by the two blocks of a cluster (TMA multicast).
#pragma once
#include <cstdint>
#include <cstdlib>

#include "common/device.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#ifndef DT_ATTN_EMU
#include <utility>

#include "common/launch_smem.cuh"
#endif
#ifdef DT_ATTN_EMU
#include "emu/attention/emu_wgmma.h"  // common/wgmma.cuh's API emulated on the host (dev/emu/attention)
#else
#include "common/wgmma.cuh"
#endif

namespace deltatune::kernels::attn_wgmma {

using bf16 = __nv_bfloat16;

// mma_rs_m64n64 / mma_rs_m64n256: d += A·B, m64n64k16 / m64n256k16, A (bf16 pairs, the mma.m16n8k16 A fragment
// of the warp's 16 rows) from registers, B from shared memory (descriptor b); TB: B is MN-major.
// bar_arrive / bar_sync: named barrier `id` (1..15; 0 is __syncthreads) of n threads: arrive and go on, or
// arrive and wait; shared memory written before an arrive is visible after the matching sync to the threads
// that sync. Host emulations: dev/emu/attention/emu_wgmma.h.
#ifdef DT_ATTN_EMU
template <int TB>
inline void mma_rs_m64n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) { wgmma::mma_rs(d, a, b, TB); }
template <int TB>
inline void mma_rs_m64n256(float (&d)[128], const uint32_t (&a)[4], uint64_t b) { wgmma::mma_rs(d, a, b, TB); }
inline void bar_arrive(int id, int n) { (void)emu::named_barrier(id, n).arrive(); }
inline void bar_sync(int id, int n) { emu::named_barrier(id, n).arrive_and_wait(); }
#else
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

template <int TB>
__device__ __forceinline__ void mma_rs_m64n256(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %134, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, p, 1, 1, %133;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TB), "r"(1));
}

__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
#endif  // DT_ATTN_EMU

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

// The m64 x 16·KC scores in x (m64n(16·KC) accumulator layout) rounded to bf16 as register-A fragments of KC
// k16 steps: the accumulator layout is the mma.m16n8 C layout, whose pairs are the A layout.
template <int KC>
__device__ __forceinline__ void pack_scores(uint32_t (&a)[KC][4], const float (&x)[8 * KC]) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    a[kc][0] = mma::pack_bf16(x[8 * kc], x[8 * kc + 1]);
    a[kc][1] = mma::pack_bf16(x[8 * kc + 2], x[8 * kc + 3]);
    a[kc][2] = mma::pack_bf16(x[8 * kc + 4], x[8 * kc + 5]);
    a[kc][3] = mma::pack_bf16(x[8 * kc + 6], x[8 * kc + 7]);
  }
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[kc][i])::"memory");  // packed before the next fence
}

// acc[j] += X·B for the NB 64-column blocks j of B (B[k][n] MN-major at descriptor b, 8-row groups of k rg bytes
// apart, 64-column blocks cb bytes apart: 1024 in the core layout), X = pack_scores(x). Issued, committed and
// waited for.
template <int KC, int NB>
__device__ __forceinline__ void score_product(float (&acc)[NB][32], const float (&x)[8 * KC], uint64_t b,
                                              uint32_t rg, uint32_t cb = 1024) {
  uint32_t a[KC][4];
  pack_scores<KC>(a, x);
#pragma unroll
  for (int j = 0; j < NB; ++j) wgmma::fence_operands(acc[j]);
  wgmma::fence();
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
#pragma unroll
    for (int j = 0; j < NB; ++j) mma_rs_m64n64<1>(acc[j], a[kc], at(b, kc * 2 * rg + j * cb));
  wgmma::commit();
  wgmma::wait<0>();
#pragma unroll
  for (int j = 0; j < NB; ++j) wgmma::fence_operands(acc[j]);
}

// As score_product with all 256 columns of B in one m64n256k16 product per k16 step (acc: the m64n256 layout,
// i.e. score_product's acc[4][32] flattened).
template <int KC>
__device__ __forceinline__ void score_product_n256(float (&acc)[128], const float (&x)[8 * KC], uint64_t b,
                                                   uint32_t rg) {
  uint32_t a[KC][4];
  pack_scores<KC>(a, x);
  wgmma::fence_operands(acc);
  wgmma::fence();
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) mma_rs_m64n256<1>(acc, a[kc], at(b, kc * 2 * rg));
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(acc);
}

// Row half r (row g + 8r of each warp's 16) of the 64 x 64·NB accumulators acc(b, i) (m64n64 blocks: register
// 4j + 2r + e of block b is column 64b + 8j + 2tq + e) times mul into out[base + column] (base: the row's first
// element + 2tq): one store a pair where out is aligned for pairs (pair_aligned: every Qwen3.5 activation and
// the F32 partials), else element by element.
__device__ __forceinline__ bool pair_aligned(KOut out) {
  return (reinterpret_cast<uintptr_t>(out.p) & (out.t == KType::F32 ? 7 : 3)) == 0;
}
template <int NB, class Acc>
__device__ __forceinline__ void store_row(KOut out, bool aligned, int64_t base, int r, float mul, const Acc& acc) {
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float x0 = mul * acc(b, 4 * j + 2 * r), x1 = mul * acc(b, 4 * j + 2 * r + 1);
      const int64_t i = base + b * 64 + j * 8;
      if (aligned) {
        st_pair<true>(out, i, x0, x1);
      } else {
        st(out, i, x0);
        st(out, i + 1, x1);
      }
    }
}

// A block's results handed to the block that finishes a group last (the dK/dV pair sums): gpu_fence after
// writing (every thread) and before reading (the last block's threads), count_done (one thread) returns how many
// blocks of the group counted before this one, ld_l2_pair reads two of another block's results past L1 (8-byte
// aligned).
#ifdef DT_ATTN_EMU  // blocks run one at a time there
inline void gpu_fence() {}
inline unsigned count_done(unsigned* c) { return (*c)++; }
inline float2 ld_l2_pair(const float* p) { return make_float2(p[0], p[1]); }
#else
__device__ __forceinline__ void gpu_fence() { __threadfence(); }
__device__ __forceinline__ unsigned count_done(unsigned* c) { return atomicAdd(c, 1u); }
__device__ __forceinline__ float2 ld_l2_pair(const float* p) { return __ldcg(reinterpret_cast<const float2*>(p)); }
#endif

#ifndef DT_ATTN_EMU
// kernel<<<grid, nt, smem, s>>>(args...) in clusters of `cluster` blocks (1 x 1 x 1: none), its shared memory
// asked through the policy (set_launch_smem).
template <class... P, class... A>
inline cudaError_t launch(const KernelPolicy& pol, void (*kernel)(P...), dim3 grid, int nt, size_t smem,
                          dim3 cluster, cudaStream_t s, A&&... args) {
  cudaError_t e = set_launch_smem(pol, kernel, smem);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(nt);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster.x;
  attr[0].val.clusterDim.y = cluster.y;
  attr[0].val.clusterDim.z = cluster.z;
  cfg.attrs = attr;
  cfg.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
#endif

// ---- K/V tiles shared by a cluster of two blocks (the forward and dQ kernels) ---------------------------------
// Under the Hopper policy with four or more query heads per kv head, the blocks of head pairs 2c and 2c+1 (the
// same kv head, the same query tile) form a cluster and walk the same key tiles: block rank 0 copies each K
// tile and rank 1 each V tile by TMA into both blocks' shared memory (multicast), so every key tile leaves L2
// once per 256 query rows instead of once per 128. Tiles land in the image layout of common/tma.cuh (R rows
// x 16 bytes per 8-column block, blocks R·16 bytes apart): as a K-major operand LBO R·16, SBO 128, k16 steps
// 2·R·16 bytes apart; MN-major (n = the head dims) LBO 128, SBO R·16, k16 steps 256 bytes apart and 64-column
// blocks 8·R·16 apart. Rows past the tensor's end land as zeros; rows past the sequence end (the next
// sequence's keys) are masked by the kernels as before (finite values times a zero probability).
struct KVMaps {
  tma::ImageMap k, v;  // K, V (T, nKV, 256) walked as (T, 2·nKV, 128)
};

#ifndef DT_ATTN_EMU
// Maps for R-row K/V tiles of k and v (T, nKV, 256); false where the driver encodes neither map form.
inline bool encode_kv_maps(KVMaps& m, const void* k, const void* v, int64_t T, int64_t nKV, int rows) {
  return tma::encode_image_map(m.k, k, T, 2 * nKV, rows) && tma::encode_image_map(m.v, v, T, 2 * nKV, rows);
}
#endif

#ifdef DT_ATTN_EMU  // the cluster kernels are not emulated (blocks run one at a time there)
inline uint32_t cluster_rank() { return 0; }
inline void cluster_sync() { std::abort(); }
inline void cluster_sync_relaxed() { std::abort(); }
inline void kv_bars_init(uint32_t) { std::abort(); }
template <int R, int HD>
inline void kv_issue(const KVMaps&, uint32_t, uint32_t, int, int, uint32_t) { std::abort(); }
inline void kv_wait(uint32_t, uint32_t) { std::abort(); }
inline void expect_tx(uint32_t, uint32_t) { std::abort(); }
inline void image_tile_mc(uint32_t, const tma::ImageMap&, int, int, uint32_t, uint16_t = 3) { std::abort(); }
#else
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of both blocks arrives and waits (release / acquire: shared-memory reads and writes before it
// are ordered before the other block's after it).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// cluster_sync without the release: no MEMBAR.ALL.GPU + ERRBAR before the arrive (which wait for the thread's
// earlier memory accesses at GPU scope: 32% of the forward's and ~20% of dQ's and dK/dV's ncu stall samples when
// the tile loops used cluster_sync, PERF_NOTES session 30). For the tile loops' buffer reuse, where the reads
// before it are wgmma's, complete (wgmma::wait<0>), and the writes after it are the TMA copies into the freed
// buffer; generic-proxy data (cp.async tiles, lse / D) still needs cluster_sync or a block barrier.
__device__ __forceinline__ void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
// The two buffers' barriers at bar, bar + 8 (one thread; a cluster_sync follows before any copy signals them).
__device__ __forceinline__ void kv_bars_init(uint32_t bar) {
  tma::mbar_init(bar, 1);
  tma::mbar_init(bar + 8, 1);
  tma::fence_barrier_init();
}
// tma::image_tile_mc with both blocks of the cluster as the default mask.
__device__ __forceinline__ void image_tile_mc(uint32_t dst, const tma::ImageMap& m, int row0, int h, uint32_t bar,
                                              uint16_t mask = 3) {
  tma::image_tile_mc(dst, m, row0, h, bar, mask);
}
__device__ __forceinline__ void expect_tx(uint32_t bar, uint32_t bytes) { tma::mbar_arrive_expect_tx(bar, bytes); }
// One thread of each block: key tile rows row0 .. row0 + R − 1 of kv head kvh into the buffer at buf (K, then V
// at buf + R·HD·2) of both blocks; this block's rank copies K (0) or V (1), and its barrier expects both.
template <int R, int HD>
__device__ __forceinline__ void kv_issue(const KVMaps& maps, uint32_t buf, uint32_t bar, int row0, int kvh,
                                         uint32_t rank) {
  constexpr uint32_t TILE = R * HD * 2;
  static_assert(HD % 128 == 0, "rows of 128-column halves");
  tma::mbar_arrive_expect_tx(bar, 2 * TILE);
  const tma::ImageMap& m = rank ? maps.v : maps.k;
#pragma unroll
  for (int half = 0; half < HD / 128; ++half)
    image_tile_mc(buf + rank * TILE + half * R * 256, m, row0, (HD / 128) * kvh + half, bar);
}
__device__ __forceinline__ void kv_wait(uint32_t bar, uint32_t parity) { tma::mbar_wait(bar, parity); }
#endif  // DT_ATTN_EMU

// Start of key step j of the forward / dQ tile loops: tile j landed for all threads (cp.async) and every
// warpgroup (MC: of both blocks) is done with tile j-1 (the other buffer). MC: only the Q tiles come by cp.async
// (ordered once, at j = 0); later steps only hand the buffer to the TMA copies (relaxed barrier).
template <bool MC>
__device__ __forceinline__ void key_step_sync(int j) {
  if constexpr (MC) {
    if (j == 0) {
      mma::cp_async_wait<0>();
      wgmma::fence_proxy_async();
      cluster_sync();
    } else {
      cluster_sync_relaxed();
    }
  } else {
    mma::cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();
  }
}

}  // namespace deltatune::kernels::attn_wgmma
