// Tensor-core version (bf16 mma.sync m16n8k16, fp32 accumulators) of the chunked GDN forward prep kernel
// of chunk_fwd.cu (gdn_chunk_prep_kernel): same inputs, outputs and layouts, dk = dv = 128 only. One block
// of 8 warps per (chunk, value head). Warps w and w + 4 share an SM sub-partition, so they take row blocks
// w and 3 − w of the triangular products (even tensor work per sub-partition).
//  0. Load q and k before their L2 norm and normalise them in registers (a warp holds a row: l2norm_row.cuh,
//     bit-identical to the L2 norm kernel; the backward's recompute also writes q̂, k̂, ρ for its other
//     kernels). Stage K̂ as bf16 hi + lo (lo = K̂ − hi: ~16 mantissa bits together), Q̂ and V as bf16; g, β.
//  1. G = cumsum(g) by one thread in the FMA kernel's order (Gc bit-identical). Warps 0-3: A_raw = K̂K̂ᵀ
//     from hi·hiᵀ + hi·loᵀ + lo·hiᵀ (T = (I + A)^{-1} is held to nmse 1e-10; a plain bf16 K̂K̂ᵀ gives
//     ~1e-5); warps 4-7: M_raw = Q̂·(hi + lo)ᵀ. Only the 16x16 tiles on or below the diagonal.
//  2. Epilogues in fp32, e^{G_i−G_j} per element and masked before the exponential as in the FMA kernel:
//     A → shared fp32, M → global. Warp w then inverts the diagonal block (I + A)_ww by forward
//     substitution, one lane per column held in registers (no barriers).
//  3. Off-diagonal blocks of T by distance d = 1, 2, 3 from the diagonal, all blocks of one distance at
//     once, one warp per block on tensor cores: P_rk = Σ_{k≤m<r} A_rm·T_mk, then T_rk = −T_rr·P_rk, formed
//     transposed with every operand split hi + lo (session 9; fp32 FMA by all threads with six barriers
//     before: forward prep 0.39 -> ~0.37 ms at 8K, emulator Tout nmse vs the FMA kernel ≤ 6.5e-11).
//  4. Tout (zeros above the diagonal, identity rows past the chunk's end, as the FMA kernel),
//     W = T·diag(βγ)·K̂ as T'hi·K̂hi + T'lo·K̂hi + T'hi·K̂lo and U = T·diag(β)·V as T''hi·V + T''lo·V (V is
//     exact in bf16 for BF16 inputs). The T fragments come from the fp32 T in shared memory (scaled by βγ
//     or β, split hi/lo) instead of ldmatrix; k only runs to the diagonal. When asked (GdnScanBf16), also
//     the forward scan's bf16 operands: W and M with their fp32 stores, diag(Γ/γ)·K̂ from K̂ reread (L2),
//     Q̂ from its tile. They move the scan's per-block fp32 → bf16 staging here, once per value head.
//     The tensor-core path (cuda_ops_seq.cpp) passes the fp32 W, M and Tout as null and keeps only the bf16
//     W, M and T (GdnScanBf16::T, read by the backward's WY kernel); U stays fp32.
// With a kept T (GdnScanBf16::T_kept: the backward after a GdnKeep::States forward) warps 0-3 widen it into
// the T tile in place of steps 1-3's K̂K̂ᵀ, A and solve; W and U then use bf16(T) split hi + lo as above.
// Half states (session 16): the backward's prep runs LEAN (k, q, T tiles only: 54.5 KiB, 64 registers, four
// blocks per SM) and gdn_odd_states_kernel forms the odd chunks' states. H200, 8K (2 x 4096, HK 16, HV 32):
// lean prep 0.125 (three blocks; 0.117 at four) + odd states 0.090 ms against 0.225 for the full-size prep
// doing both (kernel sums 1.540 / 1.541 vs 1.550 / 1.554 at three blocks); 82 x 100 tokens 1.926 vs 1.943. That
// fused variant (DT_GDN_PREP_FUSED_ODD) ran on neither policy and was retired in session 22.
// RAW (bf16 q, k, v and no q̂, k̂ output: the model's path; session 12): the tiles hold q, k, v as loaded by
// cp.async (no register staging), ρ_k and ρ_q come from the tiles with the same lanes and sums as
// l2norm_row.cuh, and the diagonal scalings move into the products' epilogues: A =
// diag(βρ_k)·(k·kᵀ)·diag(ρ_k) ⊙ decay and M = diag(scale·ρ_q)·(q·kᵀ)·diag(ρ_k) ⊙ decay from one bf16 product
// each (products of bf16 values are exact, sums fp32: more accurate than the hi + lo split), W =
// T·diag(βγρ_k)·k from two (T' hi, lo). The scan's K̂, Q̂ images are formed from the tiles with the L2 norm's
// arithmetic (bit-identical). Measured at 8K (H100, both preps): 0.665 -> 0.529 ms. Emulator nmse vs the FMA
// kernel: W ≤ 1.4e-10, M ≤ 6e-14 (was 3e-6: Q̂ no longer rounded to bf16), Tout ≤ 6e-11. ptxas (sm_90a, -O3):
// 128 registers/thread (the cap for 2 blocks/SM), no spills (RAW: 126). Shared memory 90,368 B/block (three bf16
// [64][136] tiles, A and T fp32 [64][72]; G, β, βγ, ρ_k, ρ_q), within the portable 99 KiB: RAW has no K̂ lo tile
// (session 21: K̂ hi, Q̂, V; its state S of the V' pass over K̂ + Q̂), the split kernel
// for fp32 inputs stages V into the A tile after step 3 (session 22: K̂ hi, K̂ lo, Q̂; was 107,776 B with V loaded
// in step 0).
// Measured (H100, T = 8192, HK 16, HV 32, session 6): 0.40-0.44 ms per call; ncu's stall samples by phase: staging
// ~34% (mostly waiting for the q/k/v loads), gram 11%, epilogues + diagonal solve 13%, off-diagonal T 19% (before its
// float4 operand reads: 22%, 43M instructions -> 30M), products and stores 16%, the backward's V' 7%. Running the
// value heads of a key head side by side (one-dimensional grid) and copying V by cp.async behind the staging
// changed nothing measurable. Emulator nmse vs the FMA kernel (dev/emu/gdn): W ~2e-11, U ~1e-13 (BF16 v; 2e-6
// for F32 v), M ~3e-6, Gc 0, Tout ≤ 4e-12. Estimate at T = 8192, HV 32, HK 16 (4096 blocks): memory bound.
// Per block 80 KB in (K̂, Q̂ F32, shared in L2 by the 2 value heads of a key head; V bf16) and 96 KB out (W, U
// F32, M, Tout): ~600 MB of HBM traffic, ≈ 0.2 ms on an H100 (≈ 0.15 ms on an H200). Tensor work: 1,600
// mma.m16n8k16 per block, ~50k per SM ≈ 40 µs at mma.sync rates; the serial parts (cumsum ~400 cycles, 16-row
// diagonal solve ~600 cycles, six barriers) overlap with the other resident block's loads and stores. Expect
// 0.2-0.3 ms vs 3.0 ms (FMA).
#include <cstdlib>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/l2norm_row.cuh"
#include "gdn/prep_solve.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
using gdn_prep::diagonal_t;
using gdn_prep::off_diagonal_t;
constexpr int C = kGdnChunk;
constexpr int NT = 256;     // 8 warps
constexpr int PD = 128;     // dk = dv
constexpr int LK = PD + 8;  // bf16 row stride of the K̂, Q̂, V tiles
constexpr int LA = C + 8;   // fp32 row stride of A and T: float2 fragment reads conflict-free
static_assert(LA == gdn_prep::kLA, "the solve (prep_solve.cuh) reads A and T with this stride");

// LEAN: the backward's prep of the half-states keep without its odd-state work (gdn_odd_states_kernel does
// that): only the k and q tiles, T and the row vectors. RAW (bf16 inputs): no K̂ lo tile (the products of the
// bf16 inputs are exact); the split kernel (fp32 inputs) has one but stages V into the A tile after the solve:
// both 90,368 B, within the 99 KiB of sm_86/89/120.
template <bool LEAN = false>
constexpr size_t prep_mma_smem() {
  return sizeof(bf16) * (LEAN ? 2 : 3) * size_t(C) * LK +
         sizeof(float) * ((LEAN ? 1 : 2) * size_t(C) * LA + 5 * size_t(C));
}
// The odd-state kernel: k, V' (64 rows each), S (128 rows), G and ρ_k.
constexpr size_t odd_states_smem() { return sizeof(bf16) * 4 * size_t(C) * LK + sizeof(float) * 2 * size_t(C); }

__device__ __forceinline__ float bf16_round(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// Stores 4 floats as bf16 hi (and lo = x − hi when LO) at dst (8-byte aligned).
template <bool LO>
__device__ __forceinline__ void st_split4(bf16* hi, bf16* lo, float4 x) {
  const float h0 = bf16_round(x.x), h1 = bf16_round(x.y), h2 = bf16_round(x.z), h3 = bf16_round(x.w);
  *reinterpret_cast<uint2*>(hi) = make_uint2(mma::pack_bf16(h0, h1), mma::pack_bf16(h2, h3));
  if (LO)
    *reinterpret_cast<uint2*>(lo) =
        make_uint2(mma::pack_bf16(x.x - h0, x.y - h1), mma::pack_bf16(x.z - h2, x.w - h3));
}

// acc[nb] += X[m0..m0+15][:]·Yᵀ (Y[n][k] row major, both [C][LK]) over k in [0, PD) and n-pairs p < NP, with
// X = Xh + Xl when XLO and Y = Yh + Yl when YLO (the lo·lo term is dropped). NP is a template argument so
// that the mma of all n-pairs form one block of independent work (a run-time bound splits them by branches
// and the dependent products of each accumulator stall on each other).
template <bool XLO, bool YLO, int P0, int NP>
__device__ __forceinline__ void gram_np(float (&acc)[8][4], const bf16* Xh, const bf16* Xl, const bf16* Yh,
                                        const bf16* Yl, int m0) {
#pragma unroll 2
  for (int k = 0; k < PD; k += 16) {
    uint32_t ah[4], al[4];
    frag_a(ah, Xh, LK, m0, k);
    if (XLO) frag_a(al, Xl, LK, m0, k);
#pragma unroll
    for (int p = P0; p < P0 + NP; ++p) {
      uint32_t bh[4], bl[4];
      frag_b(bh, Yh, LK, 16 * p, k);
      mma::mma16816(acc[2 * p], ah, bh[0], bh[1]);
      mma::mma16816(acc[2 * p + 1], ah, bh[2], bh[3]);
      if (YLO) {
        frag_b(bl, Yl, LK, 16 * p, k);
        mma::mma16816(acc[2 * p], ah, bl[0], bl[1]);
        mma::mma16816(acc[2 * p + 1], ah, bl[2], bl[3]);
      }
      if (XLO) {
        mma::mma16816(acc[2 * p], al, bh[0], bh[1]);
        mma::mma16816(acc[2 * p + 1], al, bh[2], bh[3]);
      }
    }
  }
}
// n-pairs [p0, p1) of the row block (the splits step 1 uses).
template <bool XLO, bool YLO>
__device__ __forceinline__ void gram(float (&acc)[8][4], const bf16* Xh, const bf16* Xl, const bf16* Yh,
                                     const bf16* Yl, int m0, int p0, int p1) {
  // clang-format off
  switch (4 * p0 + p1) {
    case 1: gram_np<XLO, YLO, 0, 1>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 2: gram_np<XLO, YLO, 0, 2>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 3: gram_np<XLO, YLO, 0, 3>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 4: gram_np<XLO, YLO, 0, 4>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 4 + 2: gram_np<XLO, YLO, 1, 1>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 8 + 3: gram_np<XLO, YLO, 2, 1>(acc, Xh, Xl, Yh, Yl, m0); break;
    case 8 + 4: gram_np<XLO, YLO, 2, 2>(acc, Xh, Xl, Yh, Yl, m0); break;
    default: break;  // empty
  }
  // clang-format on
}

// A fragments (hi, lo) of X[m][k] = T[m][k]·s[k] for rows m0..m0+15, k0..k0+15 (fp32 T, stride LA).
__device__ __forceinline__ void t_frag(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* Tf, const float* s,
                                       int m0, int k0) {
  const int lane = threadIdx.x & 31, r = m0 + (lane >> 2), c = k0 + 2 * (lane & 3);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int row = r + 8 * (q & 1), col = c + 8 * (q >> 1);
    const float2 t = *reinterpret_cast<const float2*>(Tf + row * LA + col);
    const float2 sc = *reinterpret_cast<const float2*>(s + col);
    const float x0 = t.x * sc.x, x1 = t.y * sc.y;
    const float h0 = bf16_round(x0), h1 = bf16_round(x1);
    hi[q] = mma::pack_bf16(h0, h1);
    lo[q] = mma::pack_bf16(x0 - h0, x1 - h1);
  }
}

// acc[nb] = T'[m0..][0..16·nk)·(Yh (+ Yl))[k][n0 + 8nb ..], T' = T·diag(s) split hi + lo, Y[k][n] row-major.
template <bool YLO>
__device__ __forceinline__ void t_times(float (&acc)[8][4], const float* Tf, const float* s, const bf16* Yh,
                                        const bf16* Yl, int m0, int n0, int nk) {
  zero(acc);
  for (int kb = 0; kb < nk; ++kb) {
    uint32_t ah[4], al[4];
    t_frag(ah, al, Tf, s, m0, 16 * kb);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      uint32_t bh[4];
      frag_b_t(bh, Yh, LK, n0 + 16 * p, 16 * kb);
      mma::mma16816(acc[2 * p], ah, bh[0], bh[1]);
      mma::mma16816(acc[2 * p + 1], ah, bh[2], bh[3]);
      mma::mma16816(acc[2 * p], al, bh[0], bh[1]);
      mma::mma16816(acc[2 * p + 1], al, bh[2], bh[3]);
      if (YLO) {
        uint32_t bl[4];
        frag_b_t(bl, Yl, LK, n0 + 16 * p, 16 * kb);
        mma::mma16816(acc[2 * p], ah, bl[0], bl[1]);
        mma::mma16816(acc[2 * p + 1], ah, bl[2], bl[3]);
      }
    }
  }
}

// Rows m0 + lane/4 (+8) of a 16 x 64 warp tile → dst (F32, row stride HV·PD from the chunk's first token)
// and, when not null, dsth (its bf16 copy, same layout; with IMG the chunk's operand image tile instead,
// gdn_scan_image_index), rows < len only (IMG: all rows, zeros past the end; dst must then be null).
template <bool IMG = false>
__device__ __forceinline__ void store_rows(float* dst, bf16* dsth, const float (&acc)[8][4], int m0, int n0,
                                           int len, int64_t rstride) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = m0 + (lane >> 2) + 8 * hf;
    if (i >= len && !IMG) continue;  // an image gets every row (zeros past the end: T's identity rows, β = 0)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int64_t at = i * rstride + n0 + 8 * nb + 2 * (lane & 3);
      if (dst) *reinterpret_cast<float2*>(dst + at) = make_float2(acc[nb][2 * hf], acc[nb][2 * hf + 1]);
      if (dsth)
        st_bf16x2(dsth + (IMG ? gdn_scan_image_index(i, n0 + 8 * nb + 2 * (lane & 3)) : at), acc[nb][2 * hf],
                  acc[nb][2 * hf + 1]);
    }
  }
}

// Warps 0-3 (128 threads): the kept bf16 T of one chunk ([C][C], global) widened into the fp32 tile Tf, in
// two steps (the loads, then the stores) so that work can go between them.
constexpr int kKeptTPieces = C * C / 8 / (NT / 2);  // 8-element pieces per thread (4)
__device__ __forceinline__ void load_kept_t(uint4 (&x)[kKeptTPieces], const bf16* Tk) {
#pragma unroll
  for (int e = 0; e < kKeptTPieces; ++e)
    x[e] = *reinterpret_cast<const uint4*>(Tk + 8 * (threadIdx.x + NT / 2 * e));
}
__device__ __forceinline__ void store_kept_t(float* Tf, const uint4 (&x)[kKeptTPieces]) {
#pragma unroll
  for (int e = 0; e < kKeptTPieces; ++e) {
    const int idx = 8 * (threadIdx.x + NT / 2 * e), i = idx / C, j = idx % C;
    const bf16* b = reinterpret_cast<const bf16*>(&x[e]);
    float* d = Tf + i * LA + j;
    *reinterpret_cast<float4*>(d) = make_float4(__bfloat162float(b[0]), __bfloat162float(b[1]),
                                                __bfloat162float(b[2]), __bfloat162float(b[3]));
    *reinterpret_cast<float4*>(d + 4) = make_float4(__bfloat162float(b[4]), __bfloat162float(b[5]),
                                                    __bfloat162float(b[6]), __bfloat162float(b[7]));
  }
}

// −bf16(x) of a 16 x 64 warp tile (rows m0 + lane/4 (+8), columns n0..n0+63) into a [C][LK] tile.
__device__ __forceinline__ void store_tile_neg(bf16* dst, const float (&acc)[8][4], int m0, int n0) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
      st_bf16x2(dst + (m0 + (lane >> 2) + 8 * hf) * LK + n0 + 8 * nb + 2 * (lane & 3), -acc[nb][2 * hf],
                -acc[nb][2 * hf + 1]);
}

// The scan's bf16 K̂ and Q̂ operands (GdnScanBf16) for rows < len: Kd = bf16(K̂_i·e^{G_last − G_i}) with the
// scan's own expression for the factor (its staging computes it so from Gc) and K̂ = k·ρ_k reread (L2) as the
// staging formed it, Q = the Q̂ tile (bf16(Q̂)). As operand images (img, at the chunk's key-head tiles Kd, Q;
// the first value head of each key head): all 64 rows, Kd = bf16(K̂) (the K̂ hi tile; the scan applies the
// decay to V' instead), rows past the chunk's end zero as the staging left them. RAW: the tiles hold q and k
// as loaded (bf16) and the values are formed here: bf16((1·k)·ρ_k (·dc)) and bf16((scale·q)·ρ_q), the
// arithmetic of the staging's L2 norm (l2norm_row.cuh), so both kinds agree bit for bit.
__device__ __forceinline__ uint4 raw_scaled8(const bf16* p, float scale, float rho, float dc = 1.f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  uint32_t o[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float f0 = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w[e] & 0xffffu))),
                f1 = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w[e] >> 16)));
    o[e] = mma::pack_bf16(scale * f0 * rho * dc, scale * f1 * rho * dc);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}
template <bool RAW>
__device__ __forceinline__ void store_scan_kq(bf16* Kd, bf16* Q, KIn k, const float* Rk, const float* Rq,
                                              float scale, const bf16* Kh, const bf16* Qs, const float* Gs,
                                              int64_t t0, int len, int64_t h, int64_t hk, int64_t HK,
                                              int64_t HV, bool img) {
  constexpr int R8 = PD / 8;  // 8-element pieces per row
  if (RAW) {
    const float gl = Gs[len - 1];
    for (int idx = threadIdx.x; idx < (img ? C : len) * R8; idx += NT) {
      const int r = img ? idx % C : idx / R8, c = img ? (idx / C) * 8 : (idx % R8) * 8;
      if (Kd) {
        const int64_t at = img ? gdn_scan_image_index(r, c) : ((t0 + r) * HV + h) * PD + c;
        *reinterpret_cast<uint4*>(Kd + at) =
            raw_scaled8(Kh + r * LK + c, 1.f, Rk[r], img ? 1.f : expf(gl - Gs[r]));
      }
      if (Q) {
        const int64_t at = img ? gdn_scan_image_index(r, c) : ((t0 + r) * HK + hk) * PD + c;
        *reinterpret_cast<uint4*>(Q + at) = raw_scaled8(Qs + r * LK + c, scale, Rq[r]);
      }
    }
    return;
  }
  if (img) {  // consecutive threads take consecutive rows: each image column group is one contiguous block
    for (int idx = threadIdx.x; idx < C * R8; idx += NT) {
      const int r = idx % C, c = (idx / C) * 8;
      const int64_t at = gdn_scan_image_index(r, c);
      if (Kd) *reinterpret_cast<uint4*>(Kd + at) = *reinterpret_cast<const uint4*>(Kh + r * LK + c);
      if (Q) *reinterpret_cast<uint4*>(Q + at) = *reinterpret_cast<const uint4*>(Qs + r * LK + c);
    }
    return;
  }
  const float gl = Gs[len - 1];
  for (int idx = threadIdx.x; idx < len * R8; idx += NT) {
    const int r = idx / R8, c = (idx % R8) * 8;
    if (Kd) {
      const float dc = expf(gl - Gs[r]), rho = Rk[r];
      const int64_t src = ((t0 + r) * HK + hk) * PD + c;
      float4 a = l2_row_load4(k, src), b = l2_row_load4(k, src + 4);
      a = make_float4(a.x * rho, a.y * rho, a.z * rho, a.w * rho);
      b = make_float4(b.x * rho, b.y * rho, b.z * rho, b.w * rho);
      *reinterpret_cast<uint4*>(Kd + ((t0 + r) * HV + h) * PD + c) =
          make_uint4(mma::pack_bf16(a.x * dc, a.y * dc), mma::pack_bf16(a.z * dc, a.w * dc),
                     mma::pack_bf16(b.x * dc, b.y * dc), mma::pack_bf16(b.z * dc, b.w * dc));
    }
    if (Q)
      *reinterpret_cast<uint4*>(Q + ((t0 + r) * HK + hk) * PD + c) = *reinterpret_cast<const uint4*>(Qs + r * LK + c);
  }
}

// Half states: the state at the next chunk, S' = γ_last·S + K̂ᵀ·diag(e^{G_last − G_i})·V' (the forward scan's
// update), to dst (bf16 [dk][dv]). Kt: k as loaded (bf16, rows past the end zero) with ρ_k in Rk; St: S (bf16
// [dk][LK], in flight by cp.async); Vt: V' (bf16, rows past the end zero),
// scaled here in place by ρ_k,i·e^{G_last − G_i} (so that k enters the product as it is). Warp w: state rows
// 16w .. 16w + 15, the 128 columns in two halves.
__device__ __forceinline__ void next_state(bf16* dst, const bf16* Kt, const bf16* St, bf16* Vt, const float* Gs,
                                           const float* Rk, int len) {
  const int lane = threadIdx.x & 31, r8 = lane >> 2, c2 = 2 * (lane & 3), i0 = 16 * (threadIdx.x >> 5);
  const float gl = Gs[len - 1];
  for (int idx = threadIdx.x; idx < len * (PD / 8); idx += NT) {
    const int r = idx / (PD / 8), c = (idx % (PD / 8)) * 8;
    *reinterpret_cast<uint4*>(Vt + r * LK + c) = raw_scaled8(Vt + r * LK + c, 1.f, Rk[r], expf(gl - Gs[r]));
  }
  mma::cp_async_wait<0>();
  __syncthreads();
  const float gam = expf(gl);
  float acc[8][4];
#pragma unroll
  for (int hn = 0; hn < 2; ++hn) {
    const int c0 = 64 * hn;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float2 s = __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162*>(St + (i0 + r8 + 8 * hf) * LK + c0 + 8 * nb + c2));
        acc[nb][2 * hf] = gam * s.x;
        acc[nb][2 * hf + 1] = gam * s.y;
      }
    warp_mma<8, true, true>(acc, Kt, LK, i0, Vt, LK, c0, 0, C);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        st_bf16x2(dst + (i0 + r8 + 8 * hf) * PD + c0 + 8 * nb + c2, acc[nb][2 * hf], acc[nb][2 * hf + 1]);
  }
}

// x[lane] for lane < N by constant indices (a select chain: x stays in registers).
template <int N>
__device__ __forceinline__ float lane_pick(const float (&x)[N], int lane) {
  float a = x[0];
#pragma unroll
  for (int i = 1; i < N; ++i)
    if (lane == i) a = x[i];
  return a;
}

using gdn_chunk::next_chunk_continues;

// RAW: q, k and v are BF16 and no q̂, k̂ are asked for (nout.qn null). The tiles then hold the inputs as loaded
// (cp.async, no register staging) and ρ_k, ρ_q scale the products instead: K̂K̂ᵀ = diag(ρ_k)·kkᵀ·diag(ρ_k) and
// Q̂K̂ᵀ from one bf16 product each (exact products, fp32 sums: no hi + lo split), W = T·diag(βγρ_k)·k from two.
// LEAN (RAW only): the backward's prep for the half-states keep with the odd chunks' states left to
// gdn_odd_states_kernel: M and W from q, k and the kept T; half the shared memory (prep_mma_smem<true>), four
// blocks per SM (64 registers, 48 bytes spilled: 0.117-0.118 ms at 8K on the H200 against 0.125-0.126 at three
// blocks and 80 registers with 4 bytes spilled).
template <bool RAW, bool LEAN = false>
__global__ void __launch_bounds__(NT, LEAN ? 4 : 2)
    gdn_chunk_prep_mma_kernel(KIn q, KIn k, float scale, GdnNormOut nout, KIn v, GdnGates gates,
                              const int32_t* chunks, float* W, float* U, float* M, float* Gc, float* Tout,
                              int64_t HK, int64_t HV, bf16* Wh, bf16* Kdh, bf16* Qh, bf16* Mh, bf16* Th,
                              const bf16* S16, bf16* Vn16, const bf16* Tk, bool img, bf16* U16) {
  static_assert(RAW || !LEAN, "the lean prep is the RAW kernel's");
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  // LEAN has no K̂ lo, V and A tiles (Kl, Vs and Af point at others and are never read there). RAW has no K̂ lo
  // tile (Kl points at Q̂, never read as K̂ lo) and A follows Q̂: the 128-row state S of the V' pass goes over
  // K̂ + Q̂ (−W in the dead A tile). The split kernel (KLO) has the K̂ lo tile and V goes into the A tile once
  // step 3 is done (within 99 KiB).
  constexpr bool KLO = !RAW;  // a K̂ lo tile
  bf16* Kh = reinterpret_cast<bf16*>(gdn_smem);                             // [C][LK] K̂ hi
  bf16* Qs = Kh + (KLO ? 2 : 1) * C * LK;                                   // [C][LK] Q̂
  bf16* Kl = KLO ? Kh + C * LK : Qs;                                        // [C][LK] K̂ lo
  float* Af = reinterpret_cast<float*>(Qs + C * LK);                        // [C][LA] A (strictly lower, fp32)
  bf16* Vs = reinterpret_cast<bf16*>(KLO || LEAN ? Af : Af + C * LA);        // [C][LK] V
  float* Tf = LEAN ? Af : KLO ? Af + C * LA : reinterpret_cast<float*>(Vs + C * LK);  // [C][LA] T; its upper
                                                                                       // blocks hold step 3's P_rk
  float* Gs = Tf + C * LA;                            // [C] g, then G
  float* Bs = Gs + C;                                 // [C] β
  float* BGs = Bs + C;                                // [C] β·e^{G}
  float* Rk = BGs + C;                                // [C] ρ_k = 1/‖k_i‖
  float* Rq = Rk + C;                                 // [C] ρ_q (RAW)
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int r8 = lane >> 2, c2 = 2 * (lane & 3);
  const int64_t t0 = chunks[2 * ch];
  const int len = chunks[2 * ch + 1];
  const int64_t hk = h / (HV / HK);
  const bool kept_t = LEAN || Tk != nullptr;

  // ---- 0. staging: all global loads of a thread are issued before its shared stores. Row r of q and k is
  // one warp's (lane: columns 4·lane ..), so the warp L2-normalises it in registers (l2norm_row.cuh) ----
  if constexpr (RAW) {  // cp.async of the rows as they are; ρ from the tiles (same lanes, same sums)
    const int64_t qkb = (t0 * HK + hk) * PD;
    cp_rows<C, PD, LK, NT>(Kh, static_cast<const bf16*>(k.p) + qkb, HK * PD, len);
    cp_rows<C, PD, LK, NT>(Qs, static_cast<const bf16*>(q.p) + qkb, HK * PD, len);
    if (!LEAN) cp_rows<C, PD, LK, NT>(Vs, static_cast<const bf16*>(v.p) + (t0 * HV + h) * PD, HV * PD, len);
    mma::cp_async_commit();
    if (tid < C) {
      const int64_t o = (t0 + tid) * HV + h;
      Gs[tid] = tid < len ? gdn_g_at(gates, o, h) : 0.f;
      Bs[tid] = tid < len ? gdn_beta_at(gates, o) : 0.f;
    }
    mma::cp_async_wait<0>();
    __syncthreads();
    constexpr int RW = C / (NT / 32);  // rows per warp (8)
    float4 kr[RW], qr[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
      const int r = warp * RW + i;
      kr[i] = l2_row_load4(KIn{Kh + r * LK, KType::BF16}, 4 * lane);
      qr[i] = l2_row_load4(KIn{Qs + r * LK, KType::BF16}, 4 * lane);
    }
    float rk[RW], rq[RW];
    l2_rows_normalise(kr, 1.f, nout.eps, rk);
    l2_rows_normalise(qr, scale, nout.eps, rq);
    const bool put_rho = nout.rq && h % (HV / HK) == 0;
    if (lane < RW) {  // lane i writes row warp·RW + i
      const float a = lane_pick(rk, lane), b = lane_pick(rq, lane);
      const int r = warp * RW + lane;
      Rk[r] = a, Rq[r] = b;
      if (put_rho && r < len) {
        nout.rk[(t0 + r) * HK + hk] = a;
        nout.rq[(t0 + r) * HK + hk] = b;
      }
    }
  } else {
    const int64_t qkb = (t0 * HK + hk) * PD;
    const int64_t ks = HK * PD;
    constexpr int F4 = C * PD / 4 / NT;  // float4 per thread per F32 tile (8)
    float4 kr[F4], qr[F4];
#pragma unroll
    for (int i = 0; i < F4; ++i) {
      const int idx = tid + NT * i, r = idx / (PD / 4), c = (idx % (PD / 4)) * 4;
      kr[i] = qr[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < len) {
        kr[i] = l2_row_load4(k, qkb + r * ks + c);
        qr[i] = l2_row_load4(q, qkb + r * ks + c);
      }
    }
    if (tid < C) {
      const int64_t o = (t0 + tid) * HV + h;
      Gs[tid] = tid < len ? gdn_g_at(gates, o, h) : 0.f;
      Bs[tid] = tid < len ? gdn_beta_at(gates, o) : 0.f;
    }
    // The first value head of each key head writes ρ (and q̂, k̂) when asked (the backward's other kernels).
    const bool put_rho = nout.rq && h % (HV / HK) == 0, put_norms = put_rho && nout.qn;
    float rk[F4], rq[F4];
    l2_rows_normalise(kr, 1.f, nout.eps, rk);
    l2_rows_normalise(qr, scale, nout.eps, rq);
#pragma unroll
    for (int i = 0; i < F4; ++i) {
      const int idx = tid + NT * i, r = idx / (PD / 4), c = (idx % (PD / 4)) * 4;
      if (lane == 0) Rk[r] = rk[i];
      if (put_norms && r < len) {
        *reinterpret_cast<float4*>(nout.kn + qkb + r * ks + c) = kr[i];
        *reinterpret_cast<float4*>(nout.qn + qkb + r * ks + c) = qr[i];
      }
      if (put_rho && r < len && lane == 0) {
        nout.rk[(t0 + r) * HK + hk] = rk[i];
        nout.rq[(t0 + r) * HK + hk] = rq[i];
      }
      st_split4<true>(Kh + r * LK + c, Kl + r * LK + c, kr[i]);
      st_split4<false>(Qs + r * LK + c, nullptr, qr[i]);
    }
  }
  __syncthreads();

  // ---- 1. G = cumsum(g) (bit-identical to the FMA kernel's order); raw A and M products ----
  // Row block of this warp in steps 1, 2 and 4: warps w and w + 4 share a scheduler (SM sub-partition), so
  // they take row blocks w and 3 − w to even out the triangular tensor work.
  const int rb = warp < 4 ? warp : 7 - warp, m0 = 16 * rb;
  float acc[8][4];
  zero(acc);
  if (tid == NT - 32) {  // warp 7 has the least mma work (M row block 0)
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < C / 16; ++q) {
      float x[16];
#pragma unroll
      for (int e = 0; e < 16; e += 4) {
        const float4 y = *reinterpret_cast<const float4*>(Gs + 16 * q + e);
        x[e] = y.x, x[e + 1] = y.y, x[e + 2] = y.z, x[e + 3] = y.w;
      }
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        s += x[e];
        x[e] = 16 * q + e < len ? s : 0.f;
      }
#pragma unroll
      for (int e = 0; e < 16; e += 4)
        *reinterpret_cast<float4*>(Gs + 16 * q + e) = make_float4(x[e], x[e + 1], x[e + 2], x[e + 3]);
    }
  }
  __syncwarp();  // the mma below are .aligned: the whole warp, converged after the one-lane cumsum
  // With a kept T (bf16, as Th wrote it: no K̂K̂ᵀ and no solve) warps w and 7 − w, which have the same row
  // block, share its M n-pairs: 7 − w takes [0, mh), w [mh, rb + 1) after issuing its loads of T.
  const int mh = kept_t ? (rb + 2) / 2 : rb + 1;
  if (warp >= 4) {
    gram<false, !RAW>(acc, Qs, nullptr, Kh, Kl, m0, 0, mh);
  } else if (!kept_t) {
    gram<!RAW, !RAW>(acc, Kh, Kl, Kh, Kl, m0, 0, rb + 1);
  } else {
    uint4 tk[kKeptTPieces];
    load_kept_t(tk, Tk + (static_cast<int64_t>(ch) * HV + h) * C * C);
    gram<false, !RAW>(acc, Qs, nullptr, Kh, Kl, m0, mh, rb + 1);
    store_kept_t(Tf, tk);
  }
  __syncthreads();  // G

  // ---- 2. epilogues; diagonal blocks of T ----
  if (warp < 4 && !kept_t) {
    // A_ij = β_i·(k̂_i·k̂_j)·e^{G_i−G_j} (i > j, i < len), column blocks 0..rb of row block rb.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + r8 + 8 * hf;
      const float Gi = Gs[i], bi = RAW ? Bs[i] * Rk[i] : Bs[i];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if (nb >= 2 * (rb + 1)) break;
        const int j = 8 * nb + c2;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float kk = RAW ? acc[nb][2 * hf + e] * Rk[j + e] : acc[nb][2 * hf + e];
          x[e] = (i > j + e && i < len) ? bi * kk * expf(Gi - Gs[j + e]) : 0.f;
        }
        *reinterpret_cast<float2*>(Af + i * LA + j) = make_float2(x[0], x[1]);
      }
    }
    __syncwarp();
    diagonal_t(Af, Tf, m0, len);
  }
  if (warp >= 4 || kept_t) {
    // M_ij = (q̂_i·k̂_j)·e^{G_i−G_j} (i ≥ j, i < len), all 64 columns (zeros above the diagonal); with a kept
    // T, warp w < 4 writes the n-pairs [mh, rb + 1) it formed, warp 7 − w the others.
    float* Mo = M ? M + (static_cast<int64_t>(ch) * HV + h) * C * C : nullptr;
    bf16* Moh = Mh ? Mh + (static_cast<int64_t>(ch) * HV + h) * C * C : nullptr;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + r8 + 8 * hf;
      const float Gi = Gs[i], qi = RAW ? scale * Rq[i] : 1.f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if ((warp >= 4) == (nb >= 2 * mh && nb < 2 * (rb + 1))) continue;
        const int j = 8 * nb + c2;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float qk = RAW ? qi * (acc[nb][2 * hf + e] * Rk[j + e]) : acc[nb][2 * hf + e];
          x[e] = (i >= j + e && i < len) ? qk * expf(Gi - Gs[j + e]) : 0.f;
        }
        if (Mo) *reinterpret_cast<float2*>(Mo + i * C + j) = make_float2(x[0], x[1]);
        if (Moh) st_bf16x2(Moh + (img ? gdn_scan_image_index(i, j) : i * C + j), x[0], x[1]);
      }
    }
    if (warp >= 4 && warp < 6) {
      const int i = tid - NT / 2;  // 0..63
      BGs[i] = RAW ? Bs[i] * expf(Gs[i]) * Rk[i] : Bs[i] * expf(Gs[i]);
      if (i < len) Gc[(t0 + i) * HV + h] = Gs[i];
    }
  }
  __syncthreads();

  // ---- 3. off-diagonal blocks of T, by distance d from the diagonal, on tensor cores ----
  // Block (r, k), r = k + d, by warp k: Pᵀ = Σ_{k≤m<r} T_mkᵀ·A_rmᵀ, then T_rkᵀ = −Pᵀ·T_rrᵀ (transposed so that
  // Pᵀ's accumulators are the second product's A operand as they stand). Every operand is split into bf16
  // hi + lo (3 mma per 16x8 block, lo·lo dropped: ~16 significant bits, T's nmse ~1e-10 against fp32 FMA).
  if (!kept_t) {
    for (int d = 1; d < 4; ++d) {
      if (warp + d < 4) off_diagonal_t(Af, Tf, warp, warp + d, len);
      __syncthreads();
    }
  }
  if constexpr (KLO) {  // V into the A tile, whose last readers were step 3's (or step 2's barrier with kept T)
    const int64_t vs = HV * PD, vbase = (t0 * HV + h) * PD;
    if (v.t == KType::BF16) {
      cp_rows<C, PD, LK, NT>(Vs, static_cast<const bf16*>(v.p) + vbase, vs, len);
      mma::cp_async_commit();
      mma::cp_async_wait<0>();
    } else {  // F32 / F16 values: rounded to bf16 (U's extra error ~1e-6 nmse)
      for (int idx = tid; idx < C * PD / 4; idx += NT) {
        const int r = idx / (PD / 4), c = (idx % (PD / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < len) {
          const int64_t o = vbase + r * vs + c;
          x = make_float4(ld(v, o), ld(v, o + 1), ld(v, o + 2), ld(v, o + 3));
        }
        st_split4<false>(Vs + r * LK + c, nullptr, x);
      }
    }
    __syncthreads();
  }

  // ---- 4. the scan's bf16 K̂, Q̂; Tout, W = T·diag(βγ)·K̂, U = T·diag(β)·V ----
  if (!LEAN && (Kdh || Qh)) {
    bf16 *kd = Kdh, *qd = h % (HV / HK) == 0 ? Qh : nullptr;
    if (img) {  // the chunk's key-head image tiles, written by its first value head
      kd = qd && kd ? kd + (static_cast<int64_t>(ch) * HK + hk) * C * PD : nullptr;
      if (qd) qd += (static_cast<int64_t>(ch) * HK + hk) * C * PD;
    }
    store_scan_kq<RAW>(kd, qd, k, Rk, Rq, scale, Kh, Qs, Gs, t0, len, h, hk, HK, HV, img);
  }
  if ((Tout || Th) && !kept_t) {
    const int64_t tb = (static_cast<int64_t>(ch) * HV + h) * C * C;
    for (int idx = tid; idx < C * C / 4; idx += NT) {
      const int i = idx / (C / 4), j = (idx % (C / 4)) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);  // upper blocks hold the P scratch
      if (j / 16 <= i / 16) x = *reinterpret_cast<const float4*>(Tf + i * LA + j);
      if (Tout) *reinterpret_cast<float4*>(Tout + tb + i * C + j) = x;
      if (Th) {
        st_bf16x2(Th + tb + i * C + j, x.x, x.y);
        st_bf16x2(Th + tb + i * C + j + 2, x.z, x.w);
      }
    }
  }
  {
    const int n0 = (PD / 2) * (warp >> 2);
    const int64_t rs = HV * PD, ob = (t0 * HV + h) * PD;
    t_times<!RAW>(acc, Tf, BGs, Kh, Kl, m0, n0, rb + 1);
    if (img)
      store_rows<true>(W ? W + ob : nullptr, Wh ? Wh + (static_cast<int64_t>(ch) * HV + h) * C * PD : nullptr,
                       acc, m0, n0, len, rs);
    else
      store_rows(W ? W + ob : nullptr, Wh ? Wh + ob : nullptr, acc, m0, n0, len, rs);
    if (LEAN) return;
    // −bf16(W) into the free Q̂ tile (RAW: the dead A tile); then S (bf16 [dk][dv]) over the K̂ hi + lo tiles
    // (RAW: K̂ + Q̂), no longer read.
    bf16* const Wn = RAW ? reinterpret_cast<bf16*>(Af) : Qs;
    if (S16) {
      __syncthreads();  // store_scan_kq's readers of Q̂ are done
      store_tile_neg(Wn, acc, m0, n0);
      __syncthreads();
      cp_rows<PD, PD, LK, NT>(Kh, S16 + (static_cast<int64_t>(ch) * HV + h) * PD * PD, PD, PD);
      mma::cp_async_commit();
    }
    t_times<false>(acc, Tf, Bs, Vs, nullptr, m0, n0, rb + 1);
    if (!S16) {
      store_rows(U16 ? nullptr : U + ob, U16 ? U16 + ob : nullptr, acc, m0, n0, len, rs);
      return;
    }
    // V' = U − W·S exactly as the forward scan forms it from the same bf16 W and S (fp32 accumulation).
    mma::cp_async_wait<0>();
    __syncthreads();
    warp_mma<8, false, true>(acc, Wn, LK, m0, Kh, LK, n0, 0, PD);
    store_rows(nullptr, Vn16 + ob, acc, m0, n0, len, rs);
  }
}

// Half states, the odd chunks' (GdnHalfStates::odd): block (p, h) forms the state at chunk 2p + 1 from the
// kept one at 2p and its V' as next_state does in the fused prep (zeros where chunk 2p + 1 starts another
// sequence). G from Gc as the lean prep wrote it (the prep's cumsum, bit for bit), ρ_k from the k tile with
// the prep's lanes and sums.
// Two blocks per SM: three fit the shared memory, but at 80 registers (48 bytes spilled) it took 0.094-0.095 ms
// against 0.090 (H200, 8K).
__global__ void __launch_bounds__(NT, 2)
    gdn_odd_states_kernel(KIn k, float eps, const float* Gc, const int32_t* chunks, const bf16* S16,
                          const bf16* Vk, bf16* Sodd, int64_t HK, int64_t HV, const int32_t* chunk_off, int nseq) {
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Kt = reinterpret_cast<bf16*>(gdn_smem);     // [C][LK] k as loaded
  bf16* Vt = Kt + C * LK;                           // [C][LK] V'
  bf16* St = Vt + C * LK;                           // [PD][LK] S_c
  float* Gs = reinterpret_cast<float*>(St + PD * LK);  // [C] G
  float* Rk = Gs + C;                                  // [C] ρ_k
  const int p = blockIdx.x, ch = 2 * p, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  bf16* dst = Sodd + (static_cast<int64_t>(p) * HV + h) * PD * PD;
  if (!next_chunk_continues(chunk_off, nseq, ch)) {
    uint4* so = reinterpret_cast<uint4*>(dst);
    for (int i = tid; i < PD * PD / 8; i += NT) so[i] = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const int64_t t0 = chunks[2 * ch];
  const int len = chunks[2 * ch + 1];
  const int64_t hk = h / (HV / HK);
  cp_rows<C, PD, LK, NT>(Kt, static_cast<const bf16*>(k.p) + (t0 * HK + hk) * PD, HK * PD, len);
  cp_rows<C, PD, LK, NT>(Vt, Vk + (t0 * HV + h) * PD, HV * PD, len);
  mma::cp_async_commit();
  cp_rows<PD, PD, LK, NT>(St, S16 + (static_cast<int64_t>(p) * HV + h) * PD * PD, PD, PD);
  mma::cp_async_commit();
  if (tid < C) Gs[tid] = tid < len ? Gc[(t0 + tid) * HV + h] : 0.f;
  mma::cp_async_wait<1>();
  __syncthreads();
  constexpr int RW = C / (NT / 32);  // rows per warp (8), as the prep's staging
  float4 kr[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) kr[i] = l2_row_load4(KIn{Kt + (warp * RW + i) * LK, KType::BF16}, 4 * lane);
  float rk[RW];
  l2_rows_normalise(kr, 1.f, eps, rk);
  if (lane < RW) Rk[warp * RW + lane] = lane_pick(rk, lane);
  __syncthreads();
  next_state(dst, Kt, St, Vt, Gs, Rk, len);
}

}  // namespace

size_t gdn_chunk_prep_mma_smem(int dk, int dv) {
  return gdn_chunk_mma_supported(dk, dv) ? prep_mma_smem() : 0;
}
size_t gdn_chunk_prep_mma_raw_smem() {
  return prep_mma_smem();
}
size_t gdn_lean_prep_mma_smem() {
  return prep_mma_smem<true>();
}
size_t gdn_odd_states_mma_smem() {
  return odd_states_smem();
}

#ifndef DT_ATTN_EMU  // launcher: not part of the host emulation build (dev/emu/gdn)
// The odd chunks' states by the mma.sync kernel (where the wgmma one does not apply).
static cudaError_t launch_odd_states_mma(const KernelPolicy& pol, KIn k, float eps, const float* Gc,
                                         const int32_t* chunks, int nchunks, const void* states16,
                                         const GdnHalfStates& half, int64_t HK, int64_t HV, cudaStream_t s) {
  constexpr size_t osm = odd_states_smem();
  const cudaError_t e = set_launch_smem(pol, gdn_odd_states_kernel, osm);
  if (e != cudaSuccess) return e;
  gdn_odd_states_kernel<<<dim3(static_cast<unsigned>(nchunks / 2), static_cast<unsigned>(HV)), NT, osm, s>>>(
      k, eps, Gc, chunks, static_cast<const bf16*>(states16), static_cast<const bf16*>(half.vnew),
      static_cast<bf16*>(half.odd), HK, HV, half.chunk_off, half.nseq);
  return cudaGetLastError();
}

cudaError_t launch_gdn_chunk_prep_mma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                      const GdnNormOut& nout, KIn v, const GdnGates& gates,
                                      const int32_t* chunks, int nchunks, float* W, float* U, float* M,
                                      float* Gc, float* Tout, int64_t HK, int64_t HV, int dk, int dv,
                                      cudaStream_t s, const GdnScanBf16* b16, const void* states16,
                                      void* vnew16, const GdnHalfStates* half) {
  const bool halfm = half && half->odd;
  if (!gdn_chunk_mma_supported(dk, dv) || (!halfm && (states16 == nullptr) != (vnew16 == nullptr)) ||
      (states16 == nullptr && U == nullptr && !(b16 && b16->U)) ||
      (halfm && !(states16 && !vnew16 && b16 && b16->T_kept && half->vnew && half->chunk_off && Gc)))
    return cudaErrorInvalidValue;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  const size_t smem = prep_mma_smem();
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };  // cp.async rows
  const bool raw_ok = q.t == KType::BF16 && k.t == KType::BF16 && v.t == KType::BF16 && !nout.qn &&
                      aligned16(q.p) && aligned16(k.p) && aligned16(v.p) && (!halfm || aligned16(half->vnew));
  if (halfm && !raw_ok) return cudaErrorInvalidValue;  // the half-states path is the RAW kernel's
  // raw: q, k, v read before the norm (bf16); otherwise (other dtypes, or q̂/k̂ wanted as outputs) the split
  // kernel that reads them as given is the fallback.
  const bool raw = raw_ok;
  // Half states: the lean prep, then the odd chunks' states by their own kernel.
  const bool lean = halfm;
  const auto kernel = lean  ? gdn_chunk_prep_mma_kernel<true, true>
                      : raw ? gdn_chunk_prep_mma_kernel<true>
                            : gdn_chunk_prep_mma_kernel<false>;
  const size_t smem_k = lean ? prep_mma_smem<true>() : smem;
  auto odd_states = [&] {  // after the lean prep: on wgmma with TMA copies where it applies
    if (nchunks < 2) return cudaSuccess;
    const cudaError_t o =
        launch_gdn_odd_states_wgmma(pol, k, nout.eps, Gc, chunks, nchunks, states16, *half, HK, HV, s,
                                    nout.rho_kept ? nout.rk : nullptr);
    return o != cudaErrorNotSupported
               ? o
               : launch_odd_states_mma(pol, k, nout.eps, Gc, chunks, nchunks, states16, *half, HK, HV, s);
  };
  // Hopper: the lean prep, or the forward's for the wgmma scan, on wgmma with TMA copies where they apply
  const bool fwd_img = raw && !halfm && b16 && b16->image && !states16 && !vnew16 && !W && !U && !M && !Tout;
  bool odd_done = false;  // the lean prep formed the odd states in the same pass
  cudaError_t e = lean ? launch_gdn_lean_prep_wgmma(pol, q, k, scale, nout, gates, chunks, nchunks, Gc, *b16,
                                                    HK, HV, half->tokens, s, half, states16, &odd_done)
                  : fwd_img ? launch_gdn_fwd_prep_wgmma(pol, q, k, scale, nout, v, gates, chunks, nchunks, Gc,
                                                        *b16, HK, HV, b16->tokens, s)
                            : cudaErrorNotSupported;
  if (e != cudaErrorNotSupported) return e != cudaSuccess || !lean || odd_done ? e : odd_states();
  e = set_launch_smem(pol, kernel, smem_k);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), NT, smem_k, s>>>(
      q, k, scale, nout, v, gates, chunks, W, U, M, Gc, Tout, HK, HV,
      b16 ? static_cast<bf16*>(b16->W) : nullptr, b16 ? static_cast<bf16*>(b16->Kd) : nullptr,
      b16 ? static_cast<bf16*>(b16->Q) : nullptr, b16 ? static_cast<bf16*>(b16->M) : nullptr,
      b16 ? static_cast<bf16*>(b16->T) : nullptr, static_cast<const bf16*>(states16),
      static_cast<bf16*>(vnew16), b16 ? static_cast<const bf16*>(b16->T_kept) : nullptr, b16 && b16->image,
      b16 ? static_cast<bf16*>(b16->U) : nullptr);
  e = cudaGetLastError();
  return e != cudaSuccess || !lean ? e : odd_states();
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
