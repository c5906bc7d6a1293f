// Tensor-core version (bf16 mma.sync, fp32 accumulators and fp32 state) of the chunked GDN forward scan
// (gdn_chunk_scan_kernel in chunk_fwd.cu), same contract: one block per (sequence, value head, tile of BV
// value columns), chunks of the sequence in order. Per chunk, with S the state at the chunk's start:
//   phase A (warp tile: rows m0..m0+15):  V' = U − W·S,  QS = Q̂·S             (k = dk over bf16 S)
//   phase B (the same tile):              O = diag(γ)·QS + M·V'                (causal k range only)
//           (warp tile: state rows s0..s0+31):  S ← Γ·S + (diag(Γ/γ)K̂)ᵀ·V'    (k = the chunk's 64 rows)
// Warps: 4 at BV 16/32 (warp w: m0 = 16w, s0 = 32w, all BV columns); 8 at BV 64, 4 x 2 (warp w: m0 =
// 16·(w/2), s0 = 32·(w/2), columns 32·(w%2)..+31: the warp tiles of BV 32).
// S lives in registers in the mma accumulator layout (the update is an accumulation into it) and is copied
// to a bf16 tile for phase A's products; V' goes through a bf16 tile to be phase B's operand. The inputs
// (F32 scratch of the prep kernel) are rounded to bf16 while staged (3 block barriers per chunk, 4 with PF),
// or (B16) come already rounded from the prep (GdnScanBf16) and are copied straight into the tiles by
// cp.async: no conversion and no G/Dc step in the chunk loop, 2 barriers per chunk with PF (3 without).
// WITH_O = false (o.p null: the backward's recompute, or the scan before chunk_out_mma.cu computes O chunk-
// parallel) leaves out everything that only serves the output: the Q̂ and M tiles, QS and phase B's M·V'.
//
// BV 64 (B16 with PF only; 8 warps, one block per SM): for grids of more BV 32 blocks than SMs (launcher
// below). Measured (H100, session 6) at 2 sequences of HV 32: with output 0.264-0.277 ms (BV 32 without
// prefetch: 0.367-0.383), without output 0.185 ms (BV 32 with prefetch, two per SM: 0.284). At 2 sequences of HV 32: 128 blocks, one wave, each chunk's tiles
// prefetched behind the chunk before, where BV 32 runs 256 blocks without prefetch (its prefetching variant
// with output, 151.5 KiB, fits one block per SM: two waves), every chunk step waiting for its loads; W, Q̂,
// Kd and M are also loaded once per 64 columns instead of per 32. Each output element accumulates exactly as
// at BV 32/16 (k ascending in steps of 16, one accumulator): states, V' and o are bit-identical (gdn_emu
// b16). BV 64 loads each S / V' fragment once for its two products (warp_mma2) and writes states and V' from
// their bf16 tiles (the same values) as 16-byte row pieces.
// Resources (nvcc 13.0, sm_90a, -O3, ptxas -v), B16, no spills in any instance:
//   BV 64 PF, with / without O: 224 / 164 registers, 256 threads, smem 183,808 / 130,560 B (1 block per SM)
//   BV 32 PF: 160 / 128 registers, 128 threads, 151.5 / 99.5 KiB; BV 32 without PF: 156 / 128 registers
// Estimate at T = 8192 (2 sequences of 4096), HK 16, HV 32, BV 64: 128 blocks, 64 chunks each. Per chunk and
// warp ~106 mma (phase A 64, M·V' 10, state 32) and ~56 ldmatrix.x4; per SM ~3k cycles of shared-memory
// traffic (ldmatrix 230 KB, cp.async fills 72 KB, V'/S tiles and U) against ~1.7k of the tensor pipe, as in
// the reverse scan's BV 64 (4.2 µs per chunk step): ~3.5-4.5 µs per step, ~0.25 ms (BV 32 without PF:
// 0.38 ms, ~5.9 µs per step, latency of the chunk's loads). 72 KiB of loads per block and chunk (9 MB per
// step, mostly L2: the two column tiles and HV/HK heads share them).
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
// Threads per block: 4 warps, or 8 at BV 64 (a 4 x 2 grid of BV 32's warp tiles).
template <int BV> constexpr int scan_threads() { return BV == 64 ? 256 : 128; }
constexpr int DKM = 128, DVM = 128;
constexpr int LDK = DKM + 8;  // bf16 row stride of the 64 x dk tiles
constexpr int LDM = C + 8;

// PF (prefetch): the next chunk's inputs are copied with cp.async into fp32 staging tiles while this chunk
// computes, so a chunk costs its math instead of a global round trip; 197 KiB of shared memory (one block
// per SM), chosen when the grid fits one wave at one block per SM (one or few sequences: the 2B/9B training
// shapes). Without PF: 77 KiB, 2 blocks per SM overlap each other's loads. Without O (BV 32): 50 KiB, and
// 130 KiB with PF (still one block per SM).
// B16 with PF: two sets of the bf16 tiles with G and U (fp32), one filling while the other is computed on:
// 151.5 KiB (BV 32) / 137.5 KiB (BV 16) with output (one block per SM), 99.5 / 85.5 KiB without (two blocks
// per SM: chosen whenever the grid fits one wave at two, e.g. the backward's recompute at 8K tokens). B16 without
// PF: one set, loaded at the chunk's start (83.3 / 73.3 KiB with output, 2 blocks per SM).
// BV 64 (B16 with PF only): 179.5 KiB with output, 127.5 KiB without (one block of 8 warps per SM).
template <int BV, bool WITH_O> struct Set16 {  // byte offsets in one set of the B16 tiles
  static constexpr size_t W = 0;                                                      // bf16 [C][LDK]
  static constexpr size_t Q = W + sizeof(bf16) * C * LDK;                             // bf16 [C][LDK]
  static constexpr size_t K = Q + (WITH_O ? sizeof(bf16) * C * LDK : 0);              // bf16 [C][LDK]
  static constexpr size_t M = K + sizeof(bf16) * C * LDK;                             // bf16 [C][LDM]
  static constexpr size_t G = M + (WITH_O ? sizeof(bf16) * C * LDM : 0);              // fp32 [C]
  static constexpr size_t U = G + sizeof(float) * C;                                  // fp32 [C][BV]
  static constexpr size_t bytes = U + sizeof(float) * C * BV;
};

template <int BV, bool PF, bool WITH_O, bool B16> constexpr size_t scan_mma_smem() {
  const size_t sv = sizeof(bf16) * (size_t(DKM) * (BV + 8) + size_t(C) * (BV + 8));  // S, V'
  if (B16) return sv + (PF ? 2 : 1) * Set16<BV, WITH_O>::bytes;
  const size_t o_tiles = WITH_O ? size_t(C) * LDK + size_t(C) * LDM : 0;  // Q̂, M
  const size_t tiles = sv + sizeof(bf16) * (2 * size_t(C) * LDK + o_tiles) + sizeof(float) * 2 * C;
  const size_t o_staging = WITH_O ? size_t(C) * DKM + size_t(C) * C : 0;
  const size_t staging = sizeof(float) * (size_t(C) + 2 * size_t(C) * DKM + o_staging + 2 * size_t(C) * BV);
  return tiles + (PF ? staging : 0);
}

// cp.async of rows [0, 64) x COLS floats (row r at src + r·stride) into dst[r][COLS]; rows ≥ rows_ok zeros. A
// loop the compiler keeps rolled (cp_rows unrolls: the fp32-staging prefetch variant would spill).
template <int COLS, int NT>
__device__ __forceinline__ void prefetch_rows(float* dst, const float* src, int64_t stride, int rows_ok) {
  constexpr int Q = COLS / 4;
  for (int idx = threadIdx.x; idx < C * Q; idx += NT) {
    const int r = idx / Q, c = (idx % Q) * 4;
    const bool ok = r < rows_ok;
    mma::cp_async16(mma::smem_addr(dst + r * COLS + c), ok ? src + r * stride + c : src, ok);
  }
}

// dst[r·ld + c] = src[r·(COLS + 8) + c] (bf16) for r < rows, c < COLS, 16 bytes a thread: whole row pieces
// out instead of the mma layout's 4-byte ones.
template <int COLS, int NT>
__device__ __forceinline__ void store_rows(bf16* dst, int64_t ld, const bf16* src, int rows) {
  constexpr int Q = COLS / 8;
  for (int idx = threadIdx.x; idx < rows * Q; idx += NT) {
    const int r = idx / Q, c = (idx % Q) * 8;
    *reinterpret_cast<uint4*>(dst + r * ld + c) = *reinterpret_cast<const uint4*>(src + r * (COLS + 8) + c);
  }
}

// warp_mma (B stored [k][n]) into two accumulators at once: c0 (+)= A0·B and, with TWO, c1 (+)= A1·B, A0/A1
// rows m0/m1 of stored (AT: transposed) tiles, each B fragment loaded once for both (warp_mma twice loads it
// twice). Per element the same accumulation as warp_mma: k ascending in steps of 16 into one accumulator.
template <int NB, bool AT, bool TWO>
__device__ __forceinline__ void warp_mma2(float (&c0)[NB][4], float (&c1)[NB][4], const bf16* A0,
                                          const bf16* A1, int lda, int m0, int m1, const bf16* B, int ldb,
                                          int n0, int k1) {
  for (int k = 0; k < k1; k += 16) {
    uint32_t a0[4], a1[4];
    frag_a_op<AT>(a0, A0, lda, m0, k);
    if (TWO) frag_a_op<AT>(a1, A1, lda, m1, k);
#pragma unroll
    for (int p = 0; p < NB / 2; ++p) {
      uint32_t b[4];
      frag_b_t(b, B, ldb, n0 + 16 * p, k);
      mma::mma16816(c0[2 * p], a0, b[0], b[1]);
      mma::mma16816(c0[2 * p + 1], a0, b[2], b[3]);
      if (TWO) {
        mma::mma16816(c1[2 * p], a1, b[0], b[1]);
        mma::mma16816(c1[2 * p + 1], a1, b[2], b[3]);
      }
    }
  }
}

template <int BV, bool PF, bool WITH_O, bool B16>
__global__ void __launch_bounds__(scan_threads<BV>(), (PF && WITH_O) || BV == 64 ? 1 : 2)
    gdn_chunk_scan_mma_kernel(const float* qn, const float* kn, const float* W, const float* U,
                              const float* M, const float* Gc, const int32_t* chunks,
                              const int32_t* chunk_off, KOut o, bf16* states, bf16* vnew, int64_t HK,
                              int64_t HV, const bf16* Wh, const bf16* Kdh, const bf16* Qh, const bf16* Mh,
                              bool st_even = false) {
  static_assert(BV != 64 || (PF && B16), "BV 64: the bf16 operands, prefetched");
  constexpr int NT = scan_threads<BV>(), LDV = BV + 8;
  // Warp tiles: WC warps side by side over the BV columns (1, or 2 at BV 64), each NB n-blocks wide from
  // column n0; phase A/B rows m0 .. +15 and state rows 32·(warp / WC) .. +31 (4 warps down each).
  constexpr int WC = NT / 128, NB = BV / WC / 8;
  static_assert(NB % 2 == 0, "n-blocks come in pairs");
  // BV 64 writes states and V' from their bf16 tiles as row pieces and loads each B fragment once for two
  // products (warp_mma2; shared memory is its busiest unit). The 4-warp variants keep their mma-layout
  // stores and one warp_mma per product (as measured).
  constexpr bool kRowStores = WC == 2, kPairs = WC == 2;
  using S16 = Set16<BV, WITH_O>;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Sb = reinterpret_cast<bf16*>(gdn_smem);  // [DK][LDV] S (bf16 copy)
  bf16* Vb = Sb + DKM * LDV;                      // [C][LDV]  V'
  unsigned char* sets = reinterpret_cast<unsigned char*>(Vb + C * LDV);  // B16: the tile sets (Set16)
  // fp32-staging path (not B16). The Q̂ and M tiles (and their staging) take no space without O.
  bf16* Wb = reinterpret_cast<bf16*>(sets);       // [C][LDK]  W
  bf16* Qb = Wb + C * LDK;                        // [C][LDK]  Q̂
  bf16* Kb = Qb + (WITH_O ? C * LDK : 0);         // [C][LDK]  diag(Γ/γ)·K̂
  bf16* Mb = Kb + C * LDK;                        // [C][LDM]  M
  float* G = reinterpret_cast<float*>(Mb + (WITH_O ? C * LDM : 0));  // [C] G_i
  float* Dc = G + C;                                  // [C] Γ/γ_i
  // PF staging (fp32): the next chunk's G, W, Q̂, K̂, M, U, and this chunk's U.
  float* Gs = Dc + C;                          // [C]
  float* Wf = Gs + C;                          // [C][DK]
  float* Qf = Wf + C * DKM;                    // [C][DK]
  float* Kf = Qf + (WITH_O ? C * DKM : 0);     // [C][DK]
  float* Mf = Kf + C * DKM;                    // [C][C]
  float* Uf = Mf + (WITH_O ? C * C : 0);       // [C][BV] (staging)
  float* Us = Uf + C * BV;                     // [C][BV] (this chunk)
  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const int m0 = 16 * (warp / WC), s0 = 32 * (warp / WC), n0 = 8 * NB * (warp % WC);

  auto prefetch = [&](int ch) {
    const int64_t t0 = chunks[2 * ch];
    const int len = chunks[2 * ch + 1];
    if (threadIdx.x < C) {
      const bool ok = int(threadIdx.x) < len;
      mma::cp_async4(mma::smem_addr(Gs + threadIdx.x), ok ? Gc + (t0 + threadIdx.x) * HV + h : Gc, ok);
    }
    prefetch_rows<DKM, NT>(Wf, W + (t0 * HV + h) * DKM, HV * DKM, len);
    if (WITH_O) prefetch_rows<DKM, NT>(Qf, qn + (t0 * HK + hk) * DKM, HK * DKM, len);
    prefetch_rows<DKM, NT>(Kf, kn + (t0 * HK + hk) * DKM, HK * DKM, len);
    if (WITH_O) prefetch_rows<C, NT>(Mf, M + (static_cast<int64_t>(ch) * HV + h) * C * C, C, C);
    prefetch_rows<BV, NT>(Uf, U + (t0 * HV + h) * DVM + c0, HV * DVM, len);
    mma::cp_async_commit();
  };
  auto load16 = [&](int ch, int b) {  // chunk ch's bf16 tiles, G and U into set b
    const int64_t t0 = chunks[2 * ch];
    const int len = chunks[2 * ch + 1];
    unsigned char* set = sets + b * S16::bytes;
    if (threadIdx.x < C) {
      const bool ok = int(threadIdx.x) < len;
      mma::cp_async4(mma::smem_addr(reinterpret_cast<float*>(set + S16::G) + threadIdx.x),
                     ok ? Gc + (t0 + threadIdx.x) * HV + h : Gc, ok);
    }
    cp_rows<C, DKM, LDK, NT>(reinterpret_cast<bf16*>(set + S16::W), Wh + (t0 * HV + h) * DKM, HV * DKM, len);
    if (WITH_O)
      cp_rows<C, DKM, LDK, NT>(reinterpret_cast<bf16*>(set + S16::Q), Qh + (t0 * HK + hk) * DKM, HK * DKM, len);
    cp_rows<C, DKM, LDK, NT>(reinterpret_cast<bf16*>(set + S16::K), Kdh + (t0 * HV + h) * DKM, HV * DKM, len);
    if (WITH_O)
      cp_rows<C, C, LDM, NT>(reinterpret_cast<bf16*>(set + S16::M), Mh + (static_cast<int64_t>(ch) * HV + h) * C * C,
                              C, C);
    prefetch_rows<BV, NT>(reinterpret_cast<float*>(set + S16::U), U + (t0 * HV + h) * DVM + c0, HV * DVM,
                          len);
    mma::cp_async_commit();
  };

  float S[2][NB][4];  // state rows s0 + 16·mt + (gr, gr + 8), columns n0 + 8·nb + 2·tq (+1)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) zero(S[mt]);
  for (int idx = threadIdx.x; idx < DKM * LDV; idx += NT) Sb[idx] = __float2bfloat16_rn(0.f);
  if (PF && chunk_off[n] < chunk_off[n + 1]) {
    if (B16) load16(chunk_off[n], 0);
    else prefetch(chunk_off[n]);
  }

  for (int ch = chunk_off[n]; ch < chunk_off[n + 1]; ++ch) {
    const int64_t t0 = chunks[2 * ch];
    const int len = chunks[2 * ch + 1];
    // The chunk-start state for the backward pass, bf16 (slot, HV, dk, dv): slot ch, or (st_even: even chunks
    // only) ch / 2.
    const bool put_state = states && !(st_even && (ch & 1));
    const int64_t slot = st_even ? ch >> 1 : ch;
    if (put_state && !kRowStores) {
      bf16* so = states + (slot * HV + h) * DKM * DVM + c0;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int r = s0 + 16 * mt + gr, c = n0 + 8 * nb + 2 * tq;
          st_bf16x2(so + r * DVM + c, S[mt][nb][0], S[mt][nb][1]);
          st_bf16x2(so + (r + 8) * DVM + c, S[mt][nb][2], S[mt][nb][3]);
        }
    }
    // This chunk's tiles: Wt, Qt, Kt (diag(Γ/γ)·K̂), Mt (bf16), Gt (G_i, i < len) and U rows Ur (fp32, row
    // stride u_ld).
    const bf16 *Wt = Wb, *Qt = Qb, *Kt = Kb, *Mt = Mb;
    const float *Gt = G, *Ur = PF ? Us : U + (t0 * HV + h) * DVM + c0;
    int64_t u_ld = PF ? BV : HV * DVM;
    if constexpr (B16) {
      const int b = PF ? (ch - chunk_off[n]) & 1 : 0;
      if (!PF) {
        __syncthreads();  // the previous chunk's readers of the set are done
        load16(ch, 0);
      }
      mma::cp_async_wait<0>();
      __syncthreads();  // set b landed for all threads; the previous chunk is done with set b ^ 1 and Vb
      if (PF && ch + 1 < chunk_off[n + 1]) load16(ch + 1, b ^ 1);
      const unsigned char* set = sets + b * S16::bytes;
      Wt = reinterpret_cast<const bf16*>(set + S16::W);
      Qt = reinterpret_cast<const bf16*>(set + S16::Q);
      Kt = reinterpret_cast<const bf16*>(set + S16::K);
      Mt = reinterpret_cast<const bf16*>(set + S16::M);
      Gt = reinterpret_cast<const float*>(set + S16::G);
      Ur = reinterpret_cast<const float*>(set + S16::U);
      u_ld = BV;
    } else {
      if (PF) mma::cp_async_wait<0>();
      __syncthreads();  // the previous chunk's readers of every tile are done; Sb holds this chunk's S
      if (threadIdx.x < C) {
        const int i = threadIdx.x;
        const float gl = PF ? Gs[len - 1] : Gc[(t0 + len - 1) * HV + h];
        const float gi = i < len ? (PF ? Gs[i] : Gc[(t0 + i) * HV + h]) : 0.f;
        G[i] = gi;
        Dc[i] = i < len ? expf(gl - gi) : 0.f;
      }
      __syncthreads();
      if constexpr (PF) {
        stage_rows<C, DKM, LDK, NT>(Wb, Wf, DKM, C, nullptr);
        if (WITH_O) stage_rows<C, DKM, LDK, NT>(Qb, Qf, DKM, C, nullptr);
        stage_rows<C, DKM, LDK, NT>(Kb, Kf, DKM, C, Dc);
        if (WITH_O) stage_rows<C, C, LDM, NT>(Mb, Mf, C, C, nullptr);
        for (int idx = threadIdx.x; idx < C * BV / 4; idx += NT)
          reinterpret_cast<float4*>(Us)[idx] = reinterpret_cast<const float4*>(Uf)[idx];
        __syncthreads();  // staging consumed: fetch the next chunk behind this one's math
        if (ch + 1 < chunk_off[n + 1]) prefetch(ch + 1);
      } else {
        stage_rows<C, DKM, LDK, NT>(Wb, W + (t0 * HV + h) * DKM, HV * DKM, len, nullptr);
        if (WITH_O) stage_rows<C, DKM, LDK, NT>(Qb, qn + (t0 * HK + hk) * DKM, HK * DKM, len, nullptr);
        stage_rows<C, DKM, LDK, NT>(Kb, kn + (t0 * HK + hk) * DKM, HK * DKM, len, Dc);
        if (WITH_O) stage_rows<C, C, LDM, NT>(Mb, M + (static_cast<int64_t>(ch) * HV + h) * C * C, C, C, nullptr);
        __syncthreads();
      }
    }

    // Phase A: V' = U − W·S and QS = Q̂·S for rows m0 .. +15, columns n0 ..
    float vp[NB][4], qs[NB][4];
    zero(vp);
    if constexpr (WITH_O) zero(qs);
    if constexpr (kPairs) {
      warp_mma2<NB, false, WITH_O>(vp, qs, Wt, Qt, LDK, m0, m0, Sb, LDV, n0, DKM);
    } else {
      warp_mma<NB, false, true>(vp, Wt, LDK, m0, Sb, LDV, n0, 0, DKM);
      if constexpr (WITH_O) warp_mma<NB, false, true>(qs, Qt, LDK, m0, Sb, LDV, n0, 0, DKM);
    }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + gr + 8 * hf, c = n0 + 8 * nb + 2 * tq;
        float2 v = make_float2(0.f, 0.f);
        if (i < len) {
          const float2 u = *reinterpret_cast<const float2*>(Ur + i * u_ld + c);
          v = make_float2(u.x - vp[nb][2 * hf], u.y - vp[nb][2 * hf + 1]);
          if (vnew && !kRowStores) st_bf16x2(vnew + ((t0 + i) * HV + h) * DVM + c0 + c, v.x, v.y);
        }
        st_bf16x2(Vb + i * LDV + c, v.x, v.y);
      }
    // The chunk-start state from its bf16 copy (= bf16(S); rewritten only after the barrier below).
    if (kRowStores && put_state) store_rows<BV, NT>(states + (slot * HV + h) * DKM * DVM + c0, DVM, Sb, DKM);
    __syncthreads();
    if (kRowStores && vnew) store_rows<BV, NT>(vnew + (t0 * HV + h) * DVM + c0, HV * DVM, Vb, len);

    // Phase B: O = diag(γ)·QS + M·V' (M is causal: k only up to this warp's last row).
    if constexpr (WITH_O) {
      float mv[NB][4];
      zero(mv);
      warp_mma<NB, false, true>(mv, Mt, LDM, m0, Vb, LDV, n0, 0, m0 + 16);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = m0 + gr + 8 * hf, c = n0 + 8 * nb + 2 * tq;
          if (i >= len) continue;
          const float gam = expf(Gt[i]);
          const int64_t at = ((t0 + i) * HV + h) * DVM + c0 + c;
          st(o, at, gam * qs[nb][2 * hf] + mv[nb][2 * hf]);
          st(o, at + 1, gam * qs[nb][2 * hf + 1] + mv[nb][2 * hf + 1]);
        }
    }
    // S ← Γ·S + (diag(Γ/γ)K̂)ᵀ·V' for state rows s0 .. +31, then its bf16 copy for the next chunk.
    const float gam_l = expf(Gt[len - 1]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[mt][nb][e] *= gam_l;
    if constexpr (kPairs) warp_mma2<NB, true, true>(S[0], S[1], Kt, Kt, LDK, s0, s0 + 16, Vb, LDV, n0, C);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if constexpr (!kPairs) warp_mma<NB, true, true>(S[mt], Kt, LDK, s0 + 16 * mt, Vb, LDV, n0, 0, C);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int r = s0 + 16 * mt + gr, c = n0 + 8 * nb + 2 * tq;
        st_bf16x2(Sb + r * LDV + c, S[mt][nb][0], S[mt][nb][1]);
        st_bf16x2(Sb + (r + 8) * LDV + c, S[mt][nb][2], S[mt][nb][3]);
      }
    }
  }
}

// f(BV, PF, WITH_O, B16), each a std::integral_constant, for the variant chosen at run time (bv: kChunkBV,
// half that, or 64: only with b16 and pf). False (f not called) for a variant that does not exist.
template <class F> bool with_scan_variant(int bv, bool pf, bool with_o, bool b16, F&& f) {
  auto by_b16 = [&](auto bv_c, auto pf_c, auto o_c) {
    if (b16) f(bv_c, pf_c, o_c, std::true_type{});
    else f(bv_c, pf_c, o_c, std::false_type{});
  };
  auto by_o = [&](auto bv_c, auto pf_c) {
    if (with_o) by_b16(bv_c, pf_c, std::true_type{});
    else by_b16(bv_c, pf_c, std::false_type{});
  };
  auto by_pf = [&](auto bv_c) {
    if (pf) by_o(bv_c, std::true_type{});
    else by_o(bv_c, std::false_type{});
  };
  if (bv == 64) {
    if (!b16 || !pf) return false;
    const auto bv_c = std::integral_constant<int, 64>{};
    if (with_o) f(bv_c, std::true_type{}, std::true_type{}, std::true_type{});
    else f(bv_c, std::true_type{}, std::false_type{}, std::true_type{});
    return true;
  }
  if (bv == kChunkBV) by_pf(std::integral_constant<int, kChunkBV>{});
  else if (bv == kChunkBV / 2) by_pf(std::integral_constant<int, kChunkBV / 2>{});
  else return false;
  return true;
}

// The bf16 operands (GdnScanBf16) of the variant with output when given: W and Kd (and Q and M with output).
bool scan_mma_b16(const GdnScanBf16* b16, bool with_o) {
  return b16 && b16->W && b16->Kd && (!with_o || (b16->Q && b16->M));
}

}  // namespace

#ifndef DT_ATTN_EMU
namespace {
// Column tile: gdn_scan_tile_cols's 32 (16 where even that grid fits one wave), or, with the bf16 operands,
// 64 where BV 32's grid (pairs · dv/32 blocks) has more blocks than the GPU has SMs, with or without output
// (with output the prefetching BV 32 variant runs one block per SM, so such a grid ran without prefetch;
// without output two per SM fit, but BV 64 was still faster: measured below). E.g. 2 sequences of HV 32:
// 128 blocks of BV 64 instead of 256 of BV 32; 1 sequence of HV 16 / 32 keeps BV 16 / 32.
int scan_mma_tile_cols(int64_t pairs, int dv, bool b16, bool with_o, int sms) {
  // Without output too: at 2 sequences of HV 32 (256 BV-32 blocks, one wave at two per SM with prefetch)
  // BV 64 took 0.186 ms against 0.284 (H100, session 6).
  if (b16 && pairs * (dv / kChunkBV) > int64_t(sms)) return 64;
  return gdn_scan_tile_cols(pairs, dv, sms);
}

// BV 16/32: the prefetching variant when the grid fits one wave at the blocks per SM its shared memory
// allows: one, or two for the bf16 variant without output (99.5 KiB at BV 32). BV 64 always prefetches (its
// only variant).
bool scan_mma_prefetch(int64_t blocks, bool two_per_sm, int sms) {
  return blocks <= (two_per_sm ? 2 : 1) * int64_t(sms);
}
}  // namespace

size_t gdn_chunk_scan_mma_smem(int bv, bool pf, bool with_o, bool b16) {
  size_t smem = 0;
  with_scan_variant(bv, pf, with_o, b16, [&](auto bv_c, auto pf_c, auto o_c, auto b16_c) {
    smem = scan_mma_smem<decltype(bv_c)::value, decltype(pf_c)::value, decltype(o_c)::value,
                         decltype(b16_c)::value>();
  });
  return smem;
}

size_t gdn_chunk_scan_mma_smem_max(const KernelPolicy& pol) {
  size_t m = 0;
  for (int bv : {16, 32, 64})
    for (bool pf : {false, true})
      for (bool o : {false, true})
        for (bool b16 : {false, true})
          if (pol.hopper() || (bv != 64 && !pf)) m = std::max(m, gdn_chunk_scan_mma_smem(bv, pf, o, b16));
  return m;
}

size_t gdn_chunk_mma_smem_needed(const KernelPolicy& pol) {
  // The wgmma + TMA kernels run only with the Hopper policy (compute capability 9.0: 227 KiB per block,
  // which each of them is sized for); the mma.sync kernels below run on every path.
  size_t m = std::max({gdn_chunk_prep_mma_smem(128, 128), gdn_lean_prep_mma_smem(), gdn_odd_states_mma_smem(),
                       gdn_chunk_grad_mma_smem(true), gdn_chunk_grad_mma_smem(false), gdn_wy_grad_mma_smem()});
  for (int bv : {16, 32, 64}) m = std::max(m, gdn_chunk_dscan_mma_smem(128, 128, bv, gdn_dscan_mma_one_set(pol)));
  return std::max(m, gdn_chunk_scan_mma_smem_max(pol));
}

bool gdn_chunk_mma_fits(const KernelPolicy& pol, int dk, int dv) {
  return gdn_chunk_mma_supported(dk, dv) && gdn_chunk_mma_smem_needed(pol) <= pol.smem_optin;
}

bool gdn_scan_wgmma_selected(const KernelPolicy& pol, int64_t /*pairs*/, int dv, bool with_o) {
  return pol.hopper() && with_o && gdn_chunk_mma_supported(128, dv);
}

cudaError_t launch_gdn_chunk_scan_mma(const KernelPolicy& pol, const float* qn, const float* kn,
                                      const float* W, const float* U, const float* M, const float* Gc,
                                      const int32_t* chunks, const int32_t* chunk_off, int nseq, KOut o,
                                      void* states16, void* vnew16, int64_t HK, int64_t HV, int dk, int dv,
                                      cudaStream_t s, const GdnScanBf16* b16) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  const bool with_o = o.p != nullptr, use_b16 = scan_mma_b16(b16, with_o);
  const int sms = pol.sm_count;
  // The portable policy takes the variants without prefetch (BV 16/32: 44-85 KiB); the prefetching ones (BV 64
  // always prefetches) need up to 204 KiB per block.
  const bool portable = !pol.hopper();
  const int bv = portable ? gdn_scan_tile_cols(int64_t(nseq) * HV, dv, sms)
                          : scan_mma_tile_cols(int64_t(nseq) * HV, dv, use_b16, with_o, sms);
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>(dv / bv));
  if (b16 && b16->image) {  // operand images: only the wgmma kernel reads them (gdn_scan_wgmma_selected)
    if (!(with_o && use_b16 && pol.hopper())) return cudaErrorInvalidValue;
    return launch_gdn_chunk_scan_wgmma(pol, Gc, chunks, chunk_off, nseq, o, states16, vnew16, HK, HV, *b16,
                                       bv, s);
  }
  const bool pf =
      !portable && (bv == 64 || scan_mma_prefetch(int64_t(grid.x) * grid.y, !with_o && use_b16, sms));
  decltype(&gdn_chunk_scan_mma_kernel<kChunkBV, true, true, false>) kernel = nullptr;
  size_t smem = 0;
  int threads = 0;
  const bool found =
      with_scan_variant(bv, pf, with_o, use_b16, [&](auto bv_c, auto pf_c, auto o_c, auto b16_c) {
        constexpr int BV = decltype(bv_c)::value;
        constexpr bool PF = decltype(pf_c)::value, WITH_O = decltype(o_c)::value,
                       B16 = decltype(b16_c)::value;
        kernel = gdn_chunk_scan_mma_kernel<BV, PF, WITH_O, B16>;
        smem = scan_mma_smem<BV, PF, WITH_O, B16>();
        threads = scan_threads<BV>();
      });
  if (!found) return cudaErrorInvalidValue;
  cudaError_t e = set_launch_smem(pol, kernel, smem);
  if (e != cudaSuccess) return e;
  const bf16 *Wh = nullptr, *Kdh = nullptr, *Qh = nullptr, *Mh = nullptr;
  if (use_b16) {
    Wh = static_cast<const bf16*>(b16->W), Kdh = static_cast<const bf16*>(b16->Kd);
    Qh = static_cast<const bf16*>(b16->Q), Mh = static_cast<const bf16*>(b16->M);
  }
  kernel<<<grid, threads, smem, s>>>(qn, kn, W, U, M, Gc, chunks, chunk_off, o, static_cast<bf16*>(states16),
                                     static_cast<bf16*>(vnew16), HK, HV, Wh, Kdh, Qh, Mh,
                                     b16 && b16->states_even);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
