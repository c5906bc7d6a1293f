// The chunked GDN forward scan at 16 value columns (BV 16: one sequence of HV 16, the 2B training row) on
// wgmma, with O a chunk behind: launch_gdn_chunk_scan_wgmma's contract and numerics (chunk_scan_wgmma.cu: the
// same operand images, products and bf16 roundings as the earlier role-split kernel it replaces), one block
// of two warpgroups per (sequence, value head, 16 columns), split by role (warpgroup g: state rows 64g ..;
// halves of 8 columns on m64n8 were slower, PERF_NOTES session 30). Per chunk c:
//   phase A: warpgroup 0: W·S, warpgroup 1: Q̂·S (group 1), then both: O_{c−1} = γ·QS_{c−1} + M_{c−1}·V'_{c−1}
//            (group 2; warpgroup 0's result unused, the instruction stream stays uniform); V'_c and
//            diag(Γ/γ)·V'_c into their transposed tiles once group 1 is done, O_{c−1} into its row tile
//   phase B: S ← Γ·S + K̂ᵀ·(diag(Γ/γ)·V'_c) (both, their 64 state rows); meanwhile O_{c−1} (warpgroup 1) and
//            V'_c (warpgroup 0) leave as 16-byte row pieces; bf16(S) into the S tile
// So the state's chain per chunk is W·S -> V' -> the state update (two barriers), with M·V', the O tile and
// the O stores beside it (in main's earlier role-split kernel they sat between the state update and the next
// chunk). Tiles come three chunks deep: W, Q̂, K̂ (images), U rows and G in three sets, M in a ring of four
// (M_c is read during chunk c + 1), V'ᵀ by chunk parity; chunk c + 2's copies are issued during chunk c (by a
// thread of warpgroup 1), and V' leaves through a row tile as 16-byte stores.
// Measured (H200, ncu, bench_gdn 1 x 4096, HK = HV = 16, alternated in one process with the earlier kernel):
// states and V' kept (the recompute) 114.2 -> 106.3 us, O only (the first forward) 105.8 -> 91.1 us. The same
// kernel in clusters of 2 column blocks sharing the images by TMA multicast (branch gdn35-measure) took 122 /
// 112 us: slower, as at BV 64 in session 29. ptxas: 96 registers, no spills, 206,616 B of shared memory.
#include <cstdlib>

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
using gdn_wgmma::store_acc;
constexpr int C = kGdnChunk;
constexpr int DK = 128, DV = 128, NT = 256, BV = 16, NB = BV / 8, R = BV / 2;
constexpr uint32_t kCG = C * 16;  // image column groups (see chunk_scan_wgmma.cu)
constexpr int kIss = 128;         // the copies' thread (warpgroup 1: W·S and V' are on warpgroup 0)

// Shared memory, byte offsets.
struct Smem16 {
  static constexpr int NS = 3, NM = 4;
  static constexpr int LDU = BV + 8, LDO = BV + 8;
  // One set: a chunk's W, Q̂, K̂ images, U rows (bf16 [64][LDU]), G (fp32 [64])
  static constexpr uint32_t W = 0;
  static constexpr uint32_t Q = W + C * DK * 2;
  static constexpr uint32_t K = Q + C * DK * 2;
  static constexpr uint32_t U = K + C * DK * 2;
  static constexpr uint32_t G = U + C * LDU * 2;
  static constexpr uint32_t set = (G + C * 4 + 127) / 128 * 128;
  static constexpr uint32_t Mr = NS * set;              // M images [NM][64][64] by chunk mod NM
  static constexpr uint32_t St = Mr + NM * C * C * 2;   // bf16(S) [dk][16] core layout
  static constexpr uint32_t Vt = St + BV * DK * 2;      // V'ᵀ [2][16][64] by chunk parity
  static constexpr uint32_t Dt = Vt + 2 * BV * C * 2;   // (diag(Γ/γ)·V')ᵀ [16][64]
  static constexpr uint32_t Ot = Dt + BV * C * 2;       // O rows [64][LDO]
  static constexpr uint32_t Vo = Ot + C * LDO * 2;      // V' rows [64][LDO]
  static constexpr uint32_t bar = Vo + C * LDO * 2;     // mbarriers: the images of set 0 .. NS − 1 landed
  static constexpr size_t bytes = bar + 8 * NS;         // 206,616 B (one block per SM)
};
static_assert(Smem16::set % 128 == 0 && Smem16::St % 128 == 0 && Smem16::bar % 8 == 0, "alignment");

__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_scan_wgmma16_kernel(const bf16* U, const float* Gc, const int32_t* chunks,
                                  const int32_t* chunk_off, KOut o, bf16* states, bf16* vnew, int64_t HK,
                                  int64_t HV, const bf16* Wh, const bf16* Kdh, const bf16* Qh, const bf16* Mh,
                                  bool st_even) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Smem16;
  constexpr int NS = L::NS, NM = L::NM, LDU = L::LDU, LDO = L::LDO;
  extern __shared__ __align__(128) unsigned char gdn_smem[];
  const uint32_t sbase = mma::smem_addr(gdn_smem), full0 = sbase + L::bar;
  const int n = blockIdx.x / HV, h = blockIdx.x % HV, c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), wq = (threadIdx.x >> 5) & 3,
            lane = threadIdx.x & 31;
  const int gr = lane >> 2, tq = lane & 3;
  const int cb = chunk_off[n], ce = chunk_off[n + 1];
  const bool o_rows = o.t == KType::BF16 && (reinterpret_cast<uintptr_t>(o.p) & 15) == 0;

  auto load = [&](int ch, int64_t t0, int len) {  // chunk ch's tiles (its record: t0, len)
    const int i = ch - cb, b = i % NS;
    const uint32_t set = sbase + b * L::set;
    unsigned char* setp = gdn_smem + b * L::set;
    if (threadIdx.x < C) {
      const bool ok = int(threadIdx.x) < len;
      mma::cp_async4(set + L::G + 4 * threadIdx.x, ok ? Gc + (t0 + threadIdx.x) * HV + h : Gc, ok);
    }
    if (threadIdx.x == kIss) {
      const int64_t vt = static_cast<int64_t>(ch) * HV + h, kt = static_cast<int64_t>(ch) * HK + hk;
      const uint32_t bar = full0 + 8 * b, md = sbase + L::Mr + (i % NM) * C * C * 2;
      constexpr uint32_t img = C * DK * 2, mimg = C * C * 2;
      wgmma::fence_proxy_async();  // the set's last generic reads before the copies' writes
      tma::mbar_arrive_expect_tx(bar, 3 * img + mimg);
      tma::bulk_copy(set + L::W, Wh + vt * C * DK, img, bar);
      tma::bulk_copy(set + L::Q, Qh + kt * C * DK, img, bar);
      tma::bulk_copy(set + L::K, Kdh + kt * C * DK, img, bar);
      tma::bulk_copy(md, Mh + vt * C * C, mimg, bar);
    }
    const bf16* us = U + (t0 * HV + h) * DV + c0;
    for (int p = threadIdx.x; p < C * NB; p += NT) {
      const int r = p / NB, c = (p % NB) * 8;
      const bool ok = r < len;
      mma::cp_async16(mma::smem_addr(reinterpret_cast<bf16*>(setp + L::U) + r * LDU + c),
                      ok ? us + r * HV * DV + c : us, ok);
    }
    mma::cp_async_commit();
  };

  // O of a chunk (record t0, len) from the O tile to 16-byte row pieces (warpgroup 1's threads)
  auto o_out = [&](int64_t t0, int len) {
    bf16* ob = static_cast<bf16*>(o.p) + (t0 * HV + h) * DV + c0;
    const int p = threadIdx.x - 128, r = p / NB, j = p % NB;
    if (r < len)
      *reinterpret_cast<uint4*>(ob + r * HV * DV + 8 * j) =
          *reinterpret_cast<const uint4*>(gdn_smem + L::Ot + r * LDO * 2 + 16 * j);
  };
  // O of a chunk from the accumulators, element by element (o not bf16 or not 16-byte aligned)
  auto o_direct = [&](int64_t t0, int len, const float (&x)[R]) {
#pragma unroll
    for (int j = 0; j < NB; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + gr + 8 * hf;
        if (i >= len) continue;
        const int64_t at = ((t0 + i) * HV + h) * DV + c0 + 8 * j + 2 * tq;
        st(o, at, x[4 * j + 2 * hf]);
        st(o, at + 1, x[4 * j + 2 * hf + 1]);
      }
  };

  // S: state rows 64·wg + 16·wq + gr (+8), columns 8j + 2tq (+1); acc: chunk rows 16·wq + gr (+8), same
  // columns; accO: γ·QS of the previous chunk, then its O (warpgroup 1)
  float S[R], acc[R], accO[R];
#pragma unroll
  for (int i = 0; i < R; ++i) S[i] = acc[i] = accO[i] = 0.f;
  for (int i = threadIdx.x; i < BV * DK / 8; i += NT)
    reinterpret_cast<uint4*>(gdn_smem + L::St)[i] = make_uint4(0u, 0u, 0u, 0u);
  // the tiles the first chunk's (unused) M·V' reads: zero, so that no uninitialised memory is read
  for (int i = threadIdx.x; i < BV * C / 8; i += NT)
    reinterpret_cast<uint4*>(gdn_smem + L::Vt + BV * C * 2)[i] = make_uint4(0u, 0u, 0u, 0u);
  for (int i = threadIdx.x; i < C * C / 8; i += NT)
    reinterpret_cast<uint4*>(gdn_smem + L::Mr + (NM - 1) * C * C * 2)[i] = make_uint4(0u, 0u, 0u, 0u);
  if (threadIdx.x == 0) {
    for (int b = 0; b < NS; ++b) tma::mbar_init(full0 + 8 * b, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  // Chunk records (first token, length), read from global memory three chunks ahead of their use: chunk
  // c (t0, l0), c + 1, c + 2 (whose copies are issued during chunk c), and the previous chunk's (tp, lp).
  int64_t t0 = 0, t1 = 0, t2 = 0, tp = 0;
  int l0 = 0, l1 = 0, l2 = 0, lp = 0;
  if (cb < ce) {
    t0 = chunks[2 * cb], l0 = chunks[2 * cb + 1];
    load(cb, t0, l0);
  }
  if (cb + 1 < ce) {
    t1 = chunks[2 * cb + 2], l1 = chunks[2 * cb + 3];
    load(cb + 1, t1, l1);
  }
  if (cb + 2 < ce) t2 = chunks[2 * cb + 4], l2 = chunks[2 * cb + 5];

  for (int ch = cb; ch < ce; ++ch) {
    const int i = ch - cb, b = i % NS, vb = i & 1;
    int64_t t3 = 0;
    int l3 = 0;
    if (ch + 3 < ce) t3 = chunks[2 * ch + 6], l3 = chunks[2 * ch + 7];
    if (ch + 1 < ce)
      mma::cp_async_wait<1>();  // chunk c + 1's rows may still be in flight
    else
      mma::cp_async_wait<0>();
    tma::mbar_wait(full0 + 8 * b, (i / NS) & 1);
    wgmma::fence_proxy_async();
    __syncthreads();  // set b landed; the S tile holds bf16(S); chunk c − 1 is done with its set and tiles
    const uint32_t set = sbase + b * L::set;
    const bf16* Us = reinterpret_cast<const bf16*>(gdn_smem + b * L::set + L::U);
    const float* Gt = reinterpret_cast<const float*>(gdn_smem + b * L::set + L::G);

    // Phase A: acc = (W or Q̂)·S (group 1); accO += M_{c−1}·V'_{c−1} (group 2; at c = cb its tiles hold
    // nothing: the result is not used).
    wgmma::fence_operands(acc);
    wgmma::fence_operands(accO);
    wgmma::fence();
    {
      const uint32_t a0 = set + (wg == 0 ? L::W : L::Q);
#pragma unroll
      for (int j = 0; j < DK / 16; ++j)
        wgmma::mma_m64n<0, 1>(acc, wgmma::desc(a0 + 2 * kCG * j, kCG, 128),
                              wgmma::desc(sbase + L::St + 2 * BV * 16 * j, BV * 16, 128), j > 0);
    }
    wgmma::commit();
    {
      const uint32_t mp = sbase + L::Mr + ((i + NM - 1) % NM) * C * C * 2,
                     vp = sbase + L::Vt + (vb ^ 1) * BV * C * 2;
#pragma unroll
      for (int j = 0; j < C / 16; ++j)
        wgmma::mma_m64n<0, 0>(accO, wgmma::desc(mp + 2 * kCG * j, kCG, 128),
                              wgmma::desc(vp + 256 * j, 128, C * 16), true);
    }
    wgmma::commit();
    if (ch + 2 < ce) load(ch + 2, t2, l2);
    if (states && !(st_even && (ch & 1))) {  // the chunk-start state from the S tile (16-byte row pieces)
      bf16* so = states + (static_cast<int64_t>(st_even ? ch >> 1 : ch) * HV + h) * DK * DV + c0;
      const int r = threadIdx.x / NB, kc = threadIdx.x % NB;
      *reinterpret_cast<uint4*>(so + r * DV + 8 * kc) =
          *reinterpret_cast<const uint4*>(gdn_smem + L::St + wgmma::core_offset<BV>(r, 8 * kc));
    }
    // The row factors and U while the products run: warpgroup 0 diag(Γ/γ) (0 past the chunk's end) and U,
    // warpgroup 1 γ_i.
    const float gl = Gt[l0 - 1], gam_l = expf(gl);
    float sc[2];
    float2 uu[2][NB];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = 16 * wq + gr + 8 * hf;
      if (wg == 0) {
        sc[hf] = r < l0 ? expf(gl - Gt[r]) : 0.f;
#pragma unroll
        for (int j = 0; j < NB; ++j)
          uu[hf][j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Us + r * LDU + 8 * j + 2 * tq));
      } else {
        sc[hf] = expf(Gt[r]);
#pragma unroll
        for (int j = 0; j < NB; ++j) uu[hf][j] = make_float2(0.f, 0.f);
      }
    }
    wgmma::wait<1>();
    wgmma::fence_operands(acc);
    // Warpgroup 0: V' = U − W·S (rows past the chunk's end zero); warpgroup 1: γ_i·QS. Branch-free on the
    // accumulators.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = 16 * wq + gr + 8 * hf;
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        float& x0 = acc[4 * j + 2 * hf];
        float& x1 = acc[4 * j + 2 * hf + 1];
        x0 = wg == 0 ? (r < l0 ? uu[hf][j].x - x0 : 0.f) : sc[hf] * x0;
        x1 = wg == 0 ? (r < l0 ? uu[hf][j].y - x1 : 0.f) : sc[hf] * x1;
      }
    }
    if (wg == 0) {
      if (vnew) store_acc<false>(sbase + L::Vo, 8 * LDO * 2, 16, LDO * 2, 0, acc);
      store_acc<true>(sbase + L::Vt + vb * BV * C * 2, C * 16, 0, 0, 0, acc);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int j = 0; j < NB; ++j) acc[4 * j + 2 * hf] *= sc[hf], acc[4 * j + 2 * hf + 1] *= sc[hf];
      store_acc<true>(sbase + L::Dt, C * 16, 0, 0, 0, acc);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(accO);
    if (wg == 1 && i >= 1) {  // O of chunk c − 1
      if (o_rows)
        store_acc<false>(sbase + L::Ot, 8 * LDO * 2, 16, LDO * 2, 0, accO);
      else
        o_direct(tp, lp, accO);
    }
#pragma unroll
    for (int k = 0; k < R; ++k)  // γ·QS_c (warpgroup 1) for the next chunk's O, in accO's own registers
      asm volatile("mov.b32 %0, %1;\n" : "+f"(accO[k]) : "f"(acc[k]));
    wgmma::fence_proxy_async();
    __syncthreads();  // V'ᵀ, the decayed V'ᵀ, the O tile and the V' rows complete

    // Phase B: S ← Γ·S + K̂ᵀ·(diag(Γ/γ)·V') on the warpgroup's 64 state rows (K̂ read MN-major).
#pragma unroll
    for (int k = 0; k < R; ++k) S[k] *= gam_l;
    wgmma::fence_operands(S);
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
      wgmma::mma_m64n<1, 0>(S, wgmma::desc(set + L::K + 8 * kCG * wg + 256 * j, 128, kCG),
                            wgmma::desc(sbase + L::Dt + 256 * j, 128, C * 16), true);
    wgmma::commit();
    if (wg == 1) {
      if (o_rows && i >= 1) o_out(tp, lp);
    } else if (vnew) {
      const int r = threadIdx.x / NB, j = threadIdx.x % NB;
      if (r < l0)
        *reinterpret_cast<uint4*>(vnew + ((t0 + r) * HV + h) * DV + c0 + 8 * j) =
            *reinterpret_cast<const uint4*>(gdn_smem + L::Vo + r * LDO * 2 + 16 * j);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(S);
    // bf16(S) into the S tile for the next chunk (phase A's reads of it completed before the barrier above)
    store_acc<false>(sbase + L::St, BV * 16, 128, 16, 64 * wg, S);
    tp = t0, lp = l0, t0 = t1, l0 = l1, t1 = t2, l1 = l2, t2 = t3, l2 = l3;
  }
  if (cb < ce) {  // the last chunk's O: accO (γ·QS) += M·V' from its tiles
    const int i = ce - 1 - cb;
    __syncthreads();  // warpgroup 1's reads of the O tile in the last phase B are done
    wgmma::fence_operands(accO);
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
      wgmma::mma_m64n<0, 0>(accO,
                            wgmma::desc(sbase + L::Mr + (i % NM) * C * C * 2 + 2 * kCG * j, kCG, 128),
                            wgmma::desc(sbase + L::Vt + (i & 1) * BV * C * 2 + 256 * j, 128, C * 16), true);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(accO);
    if (wg == 1) {
      if (o_rows) {
        store_acc<false>(sbase + L::Ot, 8 * LDO * 2, 16, LDO * 2, 0, accO);
        asm volatile("bar.sync 1, 128;\n" ::: "memory");  // warpgroup 1's O tile complete
        o_out(tp, lp);
      } else {
        o_direct(tp, lp, accO);
      }
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

cudaError_t launch_gdn_chunk_scan_wgmma16(const KernelPolicy& pol, const float* Gc, const int32_t* chunks,
                                          const int32_t* chunk_off, int nseq, KOut o, void* states16,
                                          void* vnew16, int64_t HK, int64_t HV, const GdnScanBf16& b16,
                                          cudaStream_t s) {
  if (nseq == 0 || HV == 0) return cudaSuccess;
  constexpr size_t smem = Smem16::bytes;
  cudaError_t e = set_launch_smem(pol, gdn_chunk_scan_wgmma16_kernel, smem);
  if (e != cudaSuccess) return e;
  gdn_chunk_scan_wgmma16_kernel<<<dim3(static_cast<unsigned>(nseq * HV), DV / BV), NT, smem, s>>>(
      static_cast<const bf16*>(b16.U), Gc, chunks, chunk_off, o, static_cast<bf16*>(states16),
      static_cast<bf16*>(vnew16), HK, HV, static_cast<const bf16*>(b16.W), static_cast<const bf16*>(b16.Kd),
      static_cast<const bf16*>(b16.Q), static_cast<const bf16*>(b16.M), b16.states_even);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
