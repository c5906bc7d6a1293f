// The chunked GDN forward scan with output on Hopper's warpgroup tensor cores (wgmma, sm_90a): the contract
// of gdn_chunk_scan_mma_kernel<BV, PF, true, true> (chunk_scan_mma.cu), reading the prep's bf16 operands as
// operand images (GdnScanBf16::image: W, Kd = K̂, Q, M; U in bf16) and fp32 G. One block of two warpgroups per
// (sequence, value head, BV = 16, 32 or 64 value columns), chunks of the sequence in order, S (128 x BV, fp32)
// in the accumulators (m64nBV products). At BV 32 and 64 the warpgroups split the value columns
// (gdn_chunk_scan_wgmma_cols_kernel, described at it); BV 16 splits them by role with O a chunk behind
// (chunk_scan_wgmma16.cu). Per chunk the state's chain is V' = U − W·S, then S ← Γ·S + K̂ᵀ·(diag(Γ/γ)·V'); O =
// γ·Q̂S + M·V' goes out through a row-major tile as 16-byte stores; the next chunk's tiles arrive by bulk copies
// (double-buffered sets) while phase A runs. The tensor cores read every operand from shared memory in the
// no-swizzle core-matrix layout (common/wgmma.cuh), where the mma.sync kernel moves each through registers by
// ldmatrix, per warp (its busiest unit: ~230 KB of ldmatrix traffic per chunk step and SM). The images make
// each tile one contiguous copy: a core-layout tile filled from row-major rows takes two L2 sector fetches per
// 32 bytes (each 16-byte piece lands apart from its neighbour), which made this kernel L2-bound (0.33 ms at
// 8K, ncu L2 82%). Numerics: the same bf16 operands and fp32 accumulation as the mma.sync kernel; O
// accumulates M·V' onto γ·QS inside the tensor core (the mma.sync kernel adds two accumulators), so o may
// differ from it in the last bits. States and V' are bf16 of the accumulators, as there.
// Measured (H100, ncu, the first role-split kernel at every BV): 8K tokens = 2 x 4096, HK 16, HV 32 (BV 64):
// 0.178-0.184 ms against the mma.sync kernel's 0.276.
#include <cstdlib>
#include <type_traits>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/chunk_scan_wgmma16.cuh"
#include "gdn/gdn.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_wgmma::pack;
using gdn_wgmma::quad_piece;
using gdn_wgmma::store_acc;
constexpr int C = kGdnChunk;
constexpr int DK = 128, DV = 128, NT = 256;

// A chunk's operand tiles arrive as the prep wrote them (GdnScanBf16::image, gdn_scan_image_index): core
// matrices of 8 rows x 16 bytes, column group major, one contiguous block per tile, copied as it is by one
// bulk copy (thread 0 issues it: no copy instructions from the other threads on the scan's serial path). Core matrices adjacent along a row are kCG = 64·16 bytes apart, adjacent 8-row
// groups 128: as a K-major operand LBO kCG, SBO 128; as the MN-major operand Kdᵀ (m = the columns) LBO 128,
// SBO kCG.
constexpr uint32_t kCG = C * 16;

// Shared memory for BV value columns (32 or 64), byte offsets.
template <int BV>
struct Smem {
  static constexpr int LDU = BV + 8;  // bf16 row stride of U: the 4-byte reads of a warp conflict-free
  static constexpr int LDO = BV + 8;  // of the O tile: stmatrix rows land in distinct banks
  // One set of a chunk's tiles:
  static constexpr uint32_t W = 0;                // [64 rows][dk] image
  static constexpr uint32_t Q = W + C * DK * 2;   // [64 rows][dk] image
  static constexpr uint32_t K = Q + C * DK * 2;   // [64 rows][dk] image (K̂; read MN-major as K̂ᵀ)
  static constexpr uint32_t M = K + C * DK * 2;   // [64][64] image
  static constexpr uint32_t U = M + C * C * 2;    // bf16 [64][LDU], columns c0 ..
  static constexpr uint32_t G = U + C * LDU * 2;  // fp32 [64]
  static constexpr uint32_t set = (G + C * 4 + 127) / 128 * 128;
  static constexpr uint32_t St = 2 * set;           // S: [dk][BV columns] core layout (phase A's B, MN-major)
  static constexpr uint32_t Vt = St + BV * DK * 2;  // V'ᵀ: [BV columns][64 rows] (phase B's B, K-major)
  static constexpr uint32_t Dt =
      Vt + BV * C * 2;  // (diag(e^{G_last−G_i})·V')ᵀ, as V'ᵀ (the state update's B)
  static constexpr uint32_t Ot = Dt + BV * C * 2;    // O: bf16 [64 rows][LDO], row-major (coalesced stores)
  static constexpr uint32_t bar = Ot + C * LDO * 2;  // two mbarriers: the images of set 0, 1
  static constexpr size_t bytes = bar + 16;          // BV 64: 194,064 B (one block per SM)
};

// The same scan with the two warpgroups split by value columns instead of by role (BV 32 or 64): warpgroup g
// takes columns ch = g·BV/2 .. + BV/2 − 1 of every product but the state update, which stays split by state
// rows. Per chunk, in both warpgroups (m64n(BV/2) products, one instruction stream):
//   phase A: V'_h = U_h − W·S_h (committed first), then QS_h = Q̂·S_h (k = dk, 8 wgmma each); V'_h and
//            diag(Γ/γ)·V'_h into their halves of the transposed tiles as soon as W·S_h is done
//   phase B: S ← Γ·S + K̂ᵀ·(diag(Γ/γ)·V') on the warpgroup's 64 state rows (committed first), then
//            O_h = γ·QS_h + M·V'_h; bf16(S) into the S tile once the state group is done, O_h after
// So V' starts after W·S alone (not after both warpgroups' products), each warpgroup forms half of V' and O,
// and no warpgroup issues a product whose result it drops (the role split issues M·V' in both). Same operands,
// tiles and numerics as the role split (bench_gdn --check against the portable kernels: the same differences to
// 4 digits). Measured (H200, ncu, states keep, same call as the role split): 8K = 2 x 4096, HK 16, HV 32 (BV
// 64): 0.182, 0.181 -> 0.176, 0.174 ms; 1 x 4096, HV 32 (the 9B training row, BV 32): 0.136 -> 0.134; 1 x 4096,
// HV 16 (the 2B row, BV 16, halves of 8 columns on m64n8; PERF_NOTES session 30): 0.113 -> 0.117, slower, so
// BV 16 keeps the role split. ptxas: BV 64 / 32: 152 / 110 registers (role split 168 / 96), no spills; the
// same shared memory.
template <int BV>
__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_scan_wgmma_cols_kernel(const bf16* U, const float* Gc, const int32_t* chunks,
                                     const int32_t* chunk_off, KOut o, bf16* states, bf16* vnew, int64_t HK,
                                     int64_t HV, const bf16* Wh, const bf16* Kdh, const bf16* Qh,
                                     const bf16* Mh, bool st_even) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(BV == 32 || BV == 64, "column halves of 16 or 32");
  using L = Smem<BV>;
  using Set = L;
  constexpr int LDU = L::LDU, LDO = L::LDO, NB = BV / 8, R = BV / 2;  // S: n-blocks, accumulators a thread
  constexpr int HB = BV / 2, NH = HB / 8, RH = HB / 2;                // a half: columns, n-blocks, accumulators
  constexpr uint32_t kSt = L::St, kVt = L::Vt, kDt = L::Dt, kOt = L::Ot;
  extern __shared__ __align__(128) unsigned char gdn_smem[];
  const uint32_t sbase = mma::smem_addr(gdn_smem);
  const int n = blockIdx.x / HV, h = blockIdx.x % HV, c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), wq = (threadIdx.x >> 5) & 3,
            lane = threadIdx.x & 31;
  const int gr = lane >> 2, tq = lane & 3, chh = wg * HB;  // chh: the warpgroup's first column in the tile
  const int cb = chunk_off[n], ce = chunk_off[n + 1];
  const bool o_rows = o.t == KType::BF16 && (reinterpret_cast<uintptr_t>(o.p) & 15) == 0;

  auto load = [&](int ch, int64_t t0, int len, int b) {  // chunk ch's tiles (its record: t0, len) into set b
    const uint32_t set = sbase + b * Set::set;
    unsigned char* setp = gdn_smem + b * Set::set;
    if (threadIdx.x < C) {
      const bool ok = int(threadIdx.x) < len;
      mma::cp_async4(set + Set::G + 4 * threadIdx.x, ok ? Gc + (t0 + threadIdx.x) * HV + h : Gc, ok);
    }
    if (threadIdx.x == 0) {
      const int64_t vt = static_cast<int64_t>(ch) * HV + h, kt = static_cast<int64_t>(ch) * HK + hk;
      const uint32_t bar = sbase + L::bar + 8 * b;
      wgmma::fence_proxy_async();
      tma::mbar_arrive_expect_tx(bar, 3 * C * DK * 2 + C * C * 2);
      tma::bulk_copy(set + Set::W, Wh + vt * C * DK, C * DK * 2, bar);
      tma::bulk_copy(set + Set::Q, Qh + kt * C * DK, C * DK * 2, bar);
      tma::bulk_copy(set + Set::K, Kdh + kt * C * DK, C * DK * 2, bar);
      tma::bulk_copy(set + Set::M, Mh + vt * C * C, C * C * 2, bar);
    }
    const bf16* us = U + (t0 * HV + h) * DV + c0;
    for (int p = threadIdx.x; p < C * NB; p += NT) {
      const int r = p / NB, c = (p % NB) * 8;
      const bool ok = r < len;
      mma::cp_async16(mma::smem_addr(reinterpret_cast<bf16*>(setp + Set::U) + r * LDU + c),
                      ok ? us + r * HV * DV + c : us, ok);
    }
    mma::cp_async_commit();
  };

  // S: state rows 64·wg + 16·wq + gr (+8), all BV columns; aw, aq: chunk rows 16·wq + gr (+8), the
  // warpgroup's columns chh + 8j + 2tq (+1) (the accumulator layout).
  float S[R], aw[RH], aq[RH];
#pragma unroll
  for (int i = 0; i < R; ++i) S[i] = 0.f;
#pragma unroll
  for (int i = 0; i < RH; ++i) aw[i] = aq[i] = 0.f;
  for (int i = threadIdx.x; i < BV * DK / 8; i += NT)
    reinterpret_cast<uint4*>(gdn_smem + kSt)[i] = make_uint4(0u, 0u, 0u, 0u);
  int64_t t0 = 0, t0n = 0;
  int len = 0, lenn = 0;
  if (threadIdx.x == 0) {
    tma::mbar_init(sbase + L::bar, 1);
    tma::mbar_init(sbase + L::bar + 8, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (cb < ce) {
    t0 = chunks[2 * cb], len = chunks[2 * cb + 1];
    load(cb, t0, len, 0);
  }
  if (cb + 1 < ce) t0n = chunks[2 * cb + 2], lenn = chunks[2 * cb + 3];

  for (int ch = cb; ch < ce; ++ch) {
    int64_t t0nn = 0;
    int lennn = 0;
    if (ch + 2 < ce) t0nn = chunks[2 * ch + 4], lennn = chunks[2 * ch + 5];
    const int b = (ch - cb) & 1;
    mma::cp_async_wait<0>();
    tma::mbar_wait(sbase + L::bar + 8 * b, ((ch - cb) >> 1) & 1);
    wgmma::fence_proxy_async();
    __syncthreads();  // set b landed; the S tile holds bf16(S); the previous chunk is done with set b ^ 1
    const uint32_t set = sbase + b * Set::set;
    const bf16* Us = reinterpret_cast<const bf16*>(gdn_smem + b * Set::set + Set::U);
    const float* Gt = reinterpret_cast<const float*>(gdn_smem + b * Set::set + Set::G);

    // Phase A: aw = W·S_h (group 1), aq = Q̂·S_h (group 2); S_h: the S tile's columns chh .. (MN-major, an
    // 8-column group 128 bytes further).
    wgmma::fence_operands(aw);
    wgmma::fence_operands(aq);
    wgmma::fence();
    {
      const uint32_t sh = sbase + kSt + (chh / 8) * 128;
#pragma unroll
      for (int j = 0; j < DK / 16; ++j)
        wgmma::mma_m64n<0, 1>(aw, wgmma::desc(set + Set::W + 2 * kCG * j, kCG, 128),
                              wgmma::desc(sh + 2 * BV * 16 * j, BV * 16, 128), j > 0);
      wgmma::commit();
#pragma unroll
      for (int j = 0; j < DK / 16; ++j)
        wgmma::mma_m64n<0, 1>(aq, wgmma::desc(set + Set::Q + 2 * kCG * j, kCG, 128),
                              wgmma::desc(sh + 2 * BV * 16 * j, BV * 16, 128), j > 0);
      wgmma::commit();
    }
    if (ch + 1 < ce) load(ch + 1, t0n, lenn, b ^ 1);
    if (states && !(st_even && (ch & 1))) {
      bf16* so = states + (static_cast<int64_t>(st_even ? ch >> 1 : ch) * HV + h) * DK * DV + c0;
#pragma unroll
      for (int e = 0; e < DK * NB / NT; ++e) {
        int r, kc;
        quad_piece<BV / 8>(threadIdx.x + NT * e, r, kc);
        *reinterpret_cast<uint4*>(so + r * DV + 8 * kc) =
            *reinterpret_cast<const uint4*>(gdn_smem + kSt + wgmma::core_offset<BV>(r, 8 * kc));
      }
    }
    wgmma::wait<1>();
    wgmma::fence_operands(aw);
    // V'_h = U_h − W·S_h (rows past the chunk's end zero), into V'ᵀ, then diag(Γ/γ)·V'_h into its transposed
    // tile (the halves' 8-column groups chh / 8 .. of both)
    float gam[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = 16 * wq + gr + 8 * hf;
      gam[hf] = expf(Gt[i]);
#pragma unroll
      for (int j = 0; j < NH; ++j) {
        const float2 u = __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162*>(Us + i * LDU + chh + 8 * j + 2 * tq));
        float& x0 = aw[4 * j + 2 * hf];
        float& x1 = aw[4 * j + 2 * hf + 1];
        x0 = i < len ? u.x - x0 : 0.f;
        x1 = i < len ? u.y - x1 : 0.f;
      }
    }
    if (vnew) {  // V'_h through the warpgroup's half of the O tile (free until phase B) to 16-byte row pieces
      store_acc<false>(sbase + kOt + 2 * chh, 8 * LDO * 2, 16, LDO * 2, 0, aw);
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
      bf16* vb = vnew + (t0 * HV + h) * DV + c0 + chh;
#pragma unroll
      for (int p = threadIdx.x & 127; p < C * NH; p += 128) {
        const int r = p / NH, j = p % NH;
        if (r < len)
          *reinterpret_cast<uint4*>(vb + r * HV * DV + 8 * j) =
              *reinterpret_cast<const uint4*>(gdn_smem + kOt + r * LDO * 2 + 2 * chh + 16 * j);
      }
    }
    store_acc<true>(sbase + kVt + (chh / 8) * C * 16, C * 16, 0, 0, 0, aw);
    {
      const float gl = Gt[len - 1];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + gr + 8 * hf;
        const float dc = i < len ? expf(gl - Gt[i]) : 0.f;
#pragma unroll
        for (int j = 0; j < NH; ++j) aw[4 * j + 2 * hf] *= dc, aw[4 * j + 2 * hf + 1] *= dc;
      }
    }
    store_acc<true>(sbase + kDt + (chh / 8) * C * 16, C * 16, 0, 0, 0, aw);
    wgmma::wait<0>();
    wgmma::fence_operands(aq);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int j = 0; j < NH; ++j) aq[4 * j + 2 * hf] *= gam[hf], aq[4 * j + 2 * hf + 1] *= gam[hf];
    wgmma::fence_proxy_async();
    __syncthreads();  // V'ᵀ and the decayed V'ᵀ complete

    // Phase B: S ← Γ·S + K̂ᵀ·(diag(Γ/γ)·V') (group 1), O_h = γ·QS_h + M·V'_h (group 2).
    const float gam_l = expf(Gt[len - 1]);
#pragma unroll
    for (int i = 0; i < R; ++i) S[i] *= gam_l;
    wgmma::fence_operands(aq);
    wgmma::fence_operands(S);
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
      wgmma::mma_m64n<1, 0>(S, wgmma::desc(set + Set::K + 8 * kCG * wg + 256 * j, 128, kCG),
                            wgmma::desc(sbase + kDt + 256 * j, 128, C * 16), true);
    wgmma::commit();
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
      wgmma::mma_m64n<0, 0>(aq, wgmma::desc(set + Set::M + 2 * kCG * j, kCG, 128),
                            wgmma::desc(sbase + kVt + (chh / 8) * C * 16 + 256 * j, 128, C * 16), true);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operands(S);
    // bf16(S) into the S tile for the next chunk (phase A's reads of it completed before the barrier above)
    store_acc<false>(sbase + kSt, BV * 16, 128, 16, 64 * wg, S);
    wgmma::wait<0>();
    wgmma::fence_operands(aq);
    if (o_rows) {
      store_acc<false>(sbase + kOt + 2 * chh, 8 * LDO * 2, 16, LDO * 2, 0, aq);
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // the warpgroup's half of the O tile
      bf16* ob = static_cast<bf16*>(o.p) + (t0 * HV + h) * DV + c0 + chh;
#pragma unroll
      for (int p = threadIdx.x & 127; p < C * NH; p += 128) {
        const int r = p / NH, j = p % NH;
        if (r < len)
          *reinterpret_cast<uint4*>(ob + r * HV * DV + 8 * j) =
              *reinterpret_cast<const uint4*>(gdn_smem + kOt + r * LDO * 2 + 2 * chh + 16 * j);
      }
    } else {
#pragma unroll
      for (int j = 0; j < NH; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = 16 * wq + gr + 8 * hf;
          if (i >= len) continue;
          const int64_t at = ((t0 + i) * HV + h) * DV + c0 + chh + 8 * j + 2 * tq;
          st(o, at, aq[4 * j + 2 * hf]);
          st(o, at + 1, aq[4 * j + 2 * hf + 1]);
        }
    }
    t0 = t0n, len = lenn, t0n = t0nn, lenn = lennn;
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

cudaError_t launch_gdn_chunk_scan_wgmma(const KernelPolicy& pol, const float* Gc, const int32_t* chunks,
                                        const int32_t* chunk_off, int nseq, KOut o, void* states16,
                                        void* vnew16, int64_t HK, int64_t HV, const GdnScanBf16& b16, int bv,
                                        cudaStream_t s) {
  if (!o.p || !b16.W || !b16.Kd || !b16.Q || !b16.M || !b16.U || !b16.image ||
      (bv != 16 && bv != 32 && bv != 64))
    return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  if (bv == 16)  // the role split with O a chunk behind (chunk_scan_wgmma16.cu)
    return launch_gdn_chunk_scan_wgmma16(pol, Gc, chunks, chunk_off, nseq, o, states16, vnew16, HK, HV, b16, s);
  auto run = [&](auto bv_c) {
    constexpr int BV = decltype(bv_c)::value;
    constexpr size_t smem = Smem<BV>::bytes;
    auto* kern = &gdn_chunk_scan_wgmma_cols_kernel<BV>;  // the warpgroups split by value columns
    cudaError_t e = set_launch_smem(pol, kern, smem);
    if (e != cudaSuccess) return e;
    kern<<<dim3(static_cast<unsigned>(nseq * HV), DV / BV), NT, smem, s>>>(
        static_cast<const bf16*>(b16.U), Gc, chunks, chunk_off, o, static_cast<bf16*>(states16),
        static_cast<bf16*>(vnew16), HK, HV, static_cast<const bf16*>(b16.W), static_cast<const bf16*>(b16.Kd),
        static_cast<const bf16*>(b16.Q), static_cast<const bf16*>(b16.M), b16.states_even);
    return cudaGetLastError();
  };
  return bv == 32 ? run(std::integral_constant<int, 32>{})
                    : run(std::integral_constant<int, 64>{});
}

}  // namespace deltatune::kernels
