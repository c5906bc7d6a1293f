// Tensor-core versions (bf16 mma.sync, fp32 accumulators) of the chunk-parallel GDN backward kernels of
// chunk_bwd.cu, same contracts and formulas (see the decomposition at the top of chunk_bwd.cu):
//  2. state products: dQ̂ (=) diag(γ)·dO·S_nᵀ, dK̂ (=) diag(Γ/γ)·V'·dS^endᵀ, dW = −dV'·S_nᵀ and the chunk's
//     extra dG term. The value dimension is the reduction: it streams in 64-column steps (dO, V', dV', S_n,
//     dS^end rounded to bf16 in shared memory); warp (wr, wc) owns rows 16wr..+15 x key columns
//     (DK/2)·wc..+DK/2−1 of all three products. Σ(S_n ⊙ dS^end) stays fp32 (from the fp32 global values).
//  3. intra: D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}) → bf16 in shared memory, dQ̂ += D·K̂, dK̂ += Dᵀ·Q̂ (triangular
//     k ranges; V', K̂, Q̂ as bf16 hi + lo, see Precision), dG row sums from the fp32 results.
//  4. WY backward: dT = dW·K̂ᵀ·diag(βγ) + dU·Vᵀ·diag(β) and K̂K̂ᵀ (warps 0-3 / 4-7), Y = dT·Tᵀ straight from
//     the dT accumulators, dÂ = −tril(Tᵀ·Y ⊙ e^{G_i−G_j}), then Xw = Tᵀ·dW, Xu = Tᵀ·dU and
//     diag(β)dÂ·K̂ + (diag(β)dÂ)ᵀ·K̂ per warp tile with their per-row dot products in the epilogue.
// Decays stay fp32 and are applied to fp32 accumulators, masked before the exponential as in the FMA path.
//
// Precision (host emulator, gdn/emu/gdn_emu.cpp, nmse vs the fp32 FMA kernels): every output ≤ 2e-5 (≤ 5.4e-6
// measured). dg is a cancelling sum: the intra D-terms enter row i of dQ̂⊙Q̂ and row j of dK̂⊙K̂ with opposite
// signs and cancel in the chunk's reverse cumsum, so bf16 rounding of K̂ in D·K̂ and of Q̂ in Dᵀ·Q̂ showed ~100x
// in dg (2.7e-4 and 8.0e-4 on a 171- and a 200-token shape). Leaving one product at a time unsplit in an
// all-split build (dg 6e-10, 171 tokens): D·K̂ 3.6e-4, Dᵀ·Q̂ 5.9e-5, dO·V'ᵀ 2.2e-6, every state or WY product ≤
// 1.8e-7. So only the intra kernel splits (gdn_mma.cuh, warp_mma_split): K̂ and Q̂ as bf16 hi + lo (both sides
// of the pair then see the same q̂_i·k̂_j; D stays one bf16 tile, the same in both) and V' in D = dO·V'ᵀ (dO too
// when it is not bf16). dg then 2.6e-6 / 3.1e-6 (K̂, Q̂ alone: 3.8e-6 / 8.4e-6). With slow decay (g ≥ −0.05, 256
// tokens) dg is 7.9e-6 unsplit, 5.0e-6 with these splits, 2.4e-6 with the state products split too (not worth
// their smem).
// mma per block (dk = dv = 128): state_grad 1536, intra 1152 (was 576; 1408 with fp32 dO), wy 1616.
// ptxas (sm_90a, 256 threads, no spills): state_grad 170 regs, 63.4 KiB smem (3 blocks/SM); intra 96 regs,
// 112.3 KiB smem (2 blocks/SM, as before the splits: the lo tiles of K̂, Q̂ reuse the dO, V' tiles after D);
// wy 154 regs, 120.3 KiB.
// Time (estimate, not measured; T=8192, HV 32): the splits add to intra one barrier, a second pass over Q̂/K̂
// (64 KiB per block from L2) and twice its ldmatrix/mma work; it is bound by staging and barriers, so ~+30% on
// intra, ≈ +0.2-0.3 ms on the three kernels' ~3-4 ms (the FMA kernels: ~14 ms).
#include "common/device.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int NT = 256;  // 8 warps

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;

// Reads the pairs src[base + r·stride + c, +1] (any storage type; zeros for r ≥ rows_ok) for r < ROWS, c in
// [0, COLS) step 2 and hands each to put(r, c, lo, hi).
template <int ROWS, int COLS, class Put>
__device__ __forceinline__ void for_kin_pairs(KIn src, int64_t base, int64_t stride, int rows_ok, Put&& put) {
  constexpr int P = COLS / 2;
  for (int idx = threadIdx.x; idx < ROWS * P; idx += NT) {
    const int r = idx / P, c = (idx % P) * 2;
    float lo = 0.f, hi = 0.f;
    if (r < rows_ok) {
      lo = ld(src, base + r * stride + c);
      hi = ld(src, base + r * stride + c + 1);
    }
    put(r, c, lo, hi);
  }
}

// dst[r][c] (bf16) = src[base + r·stride + c] for r < rows_ok, else 0.
template <int ROWS, int COLS>
__device__ __forceinline__ void stage_kin(bf16* dst, int ld_, KIn src, int64_t base, int64_t stride, int rows_ok) {
  for_kin_pairs<ROWS, COLS>(src, base, stride, rows_ok,
                            [&](int r, int c, float lo, float hi) { st_bf16x2(dst + r * ld_ + c, lo, hi); });
}

// stage_kin's lo tile (see split_bf16x2): only for storage types wider than bf16 (bf16 input is exact).
template <int ROWS, int COLS>
__device__ __forceinline__ void stage_kin_lo(bf16* dst, int ld_, KIn src, int64_t base, int64_t stride, int rows_ok) {
  for_kin_pairs<ROWS, COLS>(src, base, stride, rows_ok, [&](int r, int c, float lo, float hi) {
    uint32_t h, l;
    split_bf16x2(h, l, lo, hi);
    *reinterpret_cast<uint32_t*>(dst + r * ld_ + c) = l;
  });
}

// ---- 2. state products ------------------------------------------------------------------------------------
constexpr int kSgStep = 64;  // value columns per step
template <int DK, int DV> constexpr size_t state_grad_mma_smem() {
  return sizeof(bf16) * (3 * size_t(C) + 2 * size_t(DK)) * (kSgStep + 8) + sizeof(float) * (C + 32);
}

template <int DK, int DV>
__global__ void __launch_bounds__(NT) gdn_chunk_state_grad_mma_kernel(
    KIn dout, const float* kn, const float* Gc, const int32_t* chunks, const float* states, const float* dh,
    const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW, float* gsum, int64_t HK, int64_t HV) {
  static_assert(DK % 32 == 0 && DV % kSgStep == 0, "two warps share DK; DV streams in whole steps");
  constexpr int LD = kSgStep + 8, NB = DK / 16;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* dOs = reinterpret_cast<bf16*>(gdn_smem);  // [C][LD]
  bf16* Vps = dOs + C * LD;                        // [C][LD]
  bf16* dUs = Vps + C * LD;                        // [C][LD]
  bf16* Ss = dUs + C * LD;                         // [DK][LD]
  bf16* dSs = Ss + DK * LD;                        // [DK][LD]
  float* G = reinterpret_cast<float*>(dSs + DK * LD);  // [C]
  float* red = G + C;                                  // [32]
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int m0 = 16 * (warp & 3), n0 = (DK / 2) * (warp >> 2);
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  if (tid < C) G[tid] = tid < cr.len ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
  const float* Sn = states + (static_cast<int64_t>(ch) * HV + h) * DK * DV;
  const float* dSn = dh + (static_cast<int64_t>(ch) * HV + h) * DK * DV;
  float aq[NB][4], ak[NB][4], aw[NB][4];
  zero(aq);
  zero(ak);
  zero(aw);
  float local = 0.f;  // this thread's share of Σ(S_n ⊙ dS^end), fp32
  const int64_t rstride = HV * DV;
  for (int c0 = 0; c0 < DV; c0 += kSgStep) {
    __syncthreads();  // the previous step's readers are done
    const int64_t rbase = (cr.t0 * HV + h) * DV + c0;
    stage_kin<C, kSgStep>(dOs, LD, dout, rbase, rstride, cr.len);
    stage_f32<C, kSgStep, NT>(Vps, LD, vnew + rbase, rstride, cr.len);
    stage_f32<C, kSgStep, NT>(dUs, LD, dvn + rbase, rstride, cr.len);
    constexpr int Q = kSgStep / 4;
    for (int idx = tid; idx < DK * Q; idx += NT) {
      const int r = idx / Q, c = (idx % Q) * 4;
      const float4 s = *reinterpret_cast<const float4*>(Sn + r * DV + c0 + c);
      const float4 ds = *reinterpret_cast<const float4*>(dSn + r * DV + c0 + c);
      local += s.x * ds.x + s.y * ds.y + s.z * ds.z + s.w * ds.w;
      st_bf16x2(Ss + r * LD + c, s.x, s.y);
      st_bf16x2(Ss + r * LD + c + 2, s.z, s.w);
      st_bf16x2(dSs + r * LD + c, ds.x, ds.y);
      st_bf16x2(dSs + r * LD + c + 2, ds.z, ds.w);
    }
    __syncthreads();
    warp_mma<NB, false, false>(aq, dOs, LD, m0, Ss, LD, n0, 0, kSgStep);
    warp_mma<NB, false, false>(ak, Vps, LD, m0, dSs, LD, n0, 0, kSgStep);
    warp_mma<NB, false, false>(aw, dUs, LD, m0, Ss, LD, n0, 0, kSgStep);
  }
  const int g = lane >> 2, t4 = lane & 3;
  const float Gl = G[cr.len - 1];
  float kpart = 0.f;  // Σ(dK̂_state ⊙ K̂) over this thread's elements
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = m0 + g + 8 * hf;
    if (i >= cr.len) continue;
    const float eq = expf(G[i]), ek = expf(Gl - G[i]);
    const int64_t t = cr.t0 + i;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int d = n0 + 8 * nb + 2 * t4;
      const int64_t o = (t * HV + h) * DK + d, ok_ = (t * HK + hk) * DK + d;
      const float k0 = ek * ak[nb][2 * hf], k1 = ek * ak[nb][2 * hf + 1];
      *reinterpret_cast<float2*>(dqh + o) = make_float2(eq * aq[nb][2 * hf], eq * aq[nb][2 * hf + 1]);
      *reinterpret_cast<float2*>(dkh + o) = make_float2(k0, k1);
      *reinterpret_cast<float2*>(dW + o) = make_float2(-aw[nb][2 * hf], -aw[nb][2 * hf + 1]);
      kpart += k0 * kn[ok_] + k1 * kn[ok_ + 1];
    }
  }
  const float total = block_sum(expf(Gl) * local + kpart, red);
  if (tid == 0) gsum[static_cast<int64_t>(ch) * HV + h] = total;
}

// ---- 3. intra-chunk terms ---------------------------------------------------------------------------------
template <int DK, int DV> constexpr size_t intra_grad_mma_smem() {
  return sizeof(bf16) * (2 * size_t(C) * (DK + 8) + 4 * size_t(C) * (DV + 8) + size_t(C) * (C + 8)) +
         sizeof(float) * (5 * size_t(C));
}

template <int DK, int DV>
__global__ void __launch_bounds__(NT) gdn_chunk_intra_grad_mma_kernel(
    KIn dout, const float* qn, const float* kn, const float* Gc, const int32_t* chunks, const float* vnew,
    const float* gsum, float* dqh, float* dkh, float* dg, int64_t HK, int64_t HV) {
  static_assert(DK == DV && DK % 32 == 0, "two warps share DK; K̂/Q̂ lo tiles reuse the dO/V' tiles");
  constexpr int LK = DK + 8, LV = DV + 8, LC = C + 8, NB = DK / 16;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Qb = reinterpret_cast<bf16*>(gdn_smem);  // [C][LK] Q̂ (hi)
  bf16* Kb = Qb + C * LK;                         // [C][LK] K̂ (hi)
  bf16* dOb = Kb + C * LK;                        // [C][LV] dO, then Q̂ lo
  bf16* Vpb = dOb + C * LV;                       // [C][LV] V' hi, then K̂ lo
  bf16* Vpl = Vpb + C * LV;                       // [C][LV] V' lo
  bf16* dOl = Vpl + C * LV;                       // [C][LV] dO lo (fp32 dO only)
  bf16* Db = dOl + C * LV;                        // [C][LC] D
  bf16* Ql = dOb;
  bf16* Kl = Vpb;
  float* G = reinterpret_cast<float*>(Db + C * LC);  // [C]
  float* rq = G + C;                                 // [2][C] row sums of dQ̂ ⊙ Q̂ per column half
  float* rk = rq + 2 * C;                            // [2][C] row sums of dK̂ ⊙ K̂
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  stage_f32<C, DK, NT>(Qb, LK, qn + (cr.t0 * HK + hk) * DK, HK * DK, cr.len);
  stage_f32<C, DK, NT>(Kb, LK, kn + (cr.t0 * HK + hk) * DK, HK * DK, cr.len);
  stage_kin<C, DV>(dOb, LV, dout, (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  const bool dO_exact = dout.t == KType::BF16;
  if (!dO_exact) stage_kin_lo<C, DV>(dOl, LV, dout, (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  stage_f32_split<C, DV, NT>(Vpb, Vpl, LV, vnew + (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  if (tid < C) G[tid] = tid < cr.len ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
  __syncthreads();
  {  // D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}): warp tile rows 16wr..+15 x columns 32wc..+31
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    float d[4][4];
    zero(d);
    if (dO_exact) warp_mma_split<4, false, false, false, true>(d, dOb, dOl, LV, m0, Vpb, Vpl, LV, n0, 0, DV);
    else warp_mma_split<4, false, false, true, true>(d, dOb, dOl, LV, m0, Vpb, Vpl, LV, n0, 0, DV);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const int j = n0 + 8 * nb + 2 * t4;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          x[e] = (i >= j + e && i < cr.len) ? d[nb][2 * hf + e] * expf(G[i] - G[j + e]) : 0.f;
        st_bf16x2(Db + i * LC + j, x[0], x[1]);
      }
    }
  }
  __syncthreads();  // dO and V' are read: their tiles take the lo parts of Q̂ and K̂
  stage_f32_lo<C, DK, NT>(Ql, LK, qn + (cr.t0 * HK + hk) * DK, HK * DK, cr.len);
  stage_f32_lo<C, DK, NT>(Kl, LK, kn + (cr.t0 * HK + hk) * DK, HK * DK, cr.len);
  __syncthreads();
  {  // dQ̂ += D·K̂ (D_ij = 0 for j > i), dK̂ += Dᵀ·Q̂ (D_ji = 0 for j < i); warp tile rows 16wr x cols (DK/2)·wc
    // K̂ and Q̂ as hi + lo: dG's row sums Σ_j D_ij (q̂_i·k̂_j) from dQ̂ and Σ_i D_ij (q̂_i·k̂_j) from
    // dK̂ cancel in the chunk's reverse cumsum only if both products see the same q̂_i·k̂_j (D is
    // the same bf16 tile in both).
    const int wc = warp >> 2, m0 = 16 * (warp & 3), n0 = (DK / 2) * wc;
    float aq[NB][4], ak[NB][4];
    zero(aq);
    zero(ak);
    warp_mma_split<NB, false, true, false, true>(aq, Db, nullptr, LC, m0, Kb, Kl, LK, n0, 0, m0 + 16);
    warp_mma_split<NB, true, true, false, true>(ak, Db, nullptr, LC, m0, Qb, Ql, LK, n0, m0, C);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      const int64_t t = cr.t0 + i;
      float sq = 0.f, sk = 0.f;
      if (i < cr.len) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int d = n0 + 8 * nb + 2 * t4;
          const int64_t o = (t * HV + h) * DK + d, io = (t * HK + hk) * DK + d;
          float2 q = *reinterpret_cast<const float2*>(dqh + o), k = *reinterpret_cast<const float2*>(dkh + o);
          q.x += aq[nb][2 * hf], q.y += aq[nb][2 * hf + 1];
          k.x += ak[nb][2 * hf], k.y += ak[nb][2 * hf + 1];
          *reinterpret_cast<float2*>(dqh + o) = q;
          *reinterpret_cast<float2*>(dkh + o) = k;
          sq += q.x * qn[io] + q.y * qn[io + 1];
          sk += k.x * kn[io] + k.y * kn[io + 1];
        }
      }
      sq = gdn_chunk::quad_sum(sq);
      sk = gdn_chunk::quad_sum(sk);
      if (t4 == 0) {
        rq[wc * C + i] = sq;
        rk[wc * C + i] = sk;
      }
    }
  }
  __syncthreads();
  if (tid < cr.len)
    dg[(cr.t0 + tid) * HV + h] = (rq[tid] + rq[C + tid]) - (rk[tid] + rk[C + tid]) +
                                 (tid == cr.len - 1 ? gsum[static_cast<int64_t>(ch) * HV + h] : 0.f);
}

// ---- 4. WY backward ----------------------------------------------------------------------------------------
template <int DK, int DV> constexpr size_t wy_grad_mma_smem() {
  return sizeof(bf16) * (2 * size_t(C) * (DK + 8) + 2 * size_t(C) * (DV + 8) + 2 * size_t(C) * (C + 8)) +
         sizeof(float) * (2 * size_t(C) * (C + 1) + 7 * size_t(C));
}

template <int DK, int DV>
__global__ void __launch_bounds__(NT) gdn_chunk_wy_grad_mma_kernel(
    const float* kn, KIn v, KIn beta, const float* Gc, const int32_t* chunks, const float* Tm, const float* dW,
    const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta, int64_t HK, int64_t HV) {
  static_assert(DK == DV && DK % 32 == 0, "one warp tile shape serves the key and value products");
  constexpr int LK = DK + 8, LV = DV + 8, LC = C + 8, LF = C + 1, NB = DK / 16;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Kb = reinterpret_cast<bf16*>(gdn_smem);  // [C][LK] K̂
  bf16* dWb = Kb + C * LK;                        // [C][LK] dW
  bf16* Vb = dWb + C * LK;                        // [C][LV] V
  bf16* dUb = Vb + C * LV;                        // [C][LV] dU = dV'
  bf16* Tb = dUb + C * LV;                        // [C][LC] T = (I + A)^{-1}
  bf16* Yb = Tb + C * LC;                         // [C][LC] Y = dT·Tᵀ, then diag(β)·dÂ
  float* dAf = reinterpret_cast<float*>(Yb + C * LC);  // [C][LF] dÂ (fp32)
  float* KKf = dAf + C * LF;                           // [C][LF] K̂K̂ᵀ
  float* G = KKf + C * LF;                             // [C]
  float* B = G + C;                                    // [C] β
  float* dGv = B + C;                                  // [C]
  float* xwk = dGv + C;                                // [2][C] row sums of Xw ⊙ K̂ per column half
  float* xuv = xwk + 2 * C;                            // [2][C] row sums of Xu ⊙ V
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  stage_f32<C, DK, NT>(Kb, LK, kn + (cr.t0 * HK + hk) * DK, HK * DK, cr.len);
  stage_f32<C, DK, NT>(dWb, LK, dW + (cr.t0 * HV + h) * DK, HV * DK, cr.len);
  stage_kin<C, DV>(Vb, LV, v, (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  stage_f32<C, DV, NT>(dUb, LV, dvn + (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  // All 64 rows of T are valid: the prep stores identity rows/columns past the chunk's end.
  stage_f32<C, C, NT>(Tb, LC, Tm + (static_cast<int64_t>(ch) * HV + h) * C * C, C, C);
  if (tid < C) {
    const bool ok = tid < cr.len;
    G[tid] = ok ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
    B[tid] = ok ? ld(beta, (cr.t0 + tid) * HV + h) : 0.f;
  }
  __syncthreads();
  if (warp < 4) {
    // dT rows 16w..+15 (all 64 columns), then Y = dT·Tᵀ with dT's accumulators as the A operand.
    const int m0 = 16 * warp;
    float a[8][4], b[8][4];
    zero(a);
    zero(b);
    warp_mma<8, false, false>(a, dWb, LK, m0, Kb, LK, 0, 0, DK);
    warp_mma<8, false, false>(b, dUb, LV, m0, Vb, LV, 0, 0, DV);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 8 * nb + 2 * t4 + (e & 1);
        a[nb][e] = B[j] * (expf(G[j]) * a[nb][e] + b[nb][e]);
      }
    zero(b);  // Y
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t af[4];
      mma::c_to_a(af, a[2 * c], a[2 * c + 1]);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        uint32_t bf[4];
        frag_b(bf, Tb, LC, 16 * p, 16 * c);
        mma::mma16816(b[2 * p], af, bf[0], bf[1]);
        mma::mma16816(b[2 * p + 1], af, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int j = 8 * nb + 2 * t4;
      st_bf16x2(Yb + (m0 + g) * LC + j, b[nb][0], b[nb][1]);
      st_bf16x2(Yb + (m0 + g + 8) * LC + j, b[nb][2], b[nb][3]);
    }
  } else {
    const int m0 = 16 * (warp - 4);
    float kk[8][4];
    zero(kk);
    warp_mma<8, false, false>(kk, Kb, LK, m0, Kb, LK, 0, 0, DK);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int j = 8 * nb + 2 * t4;
      KKf[(m0 + g) * LF + j] = kk[nb][0];
      KKf[(m0 + g) * LF + j + 1] = kk[nb][1];
      KKf[(m0 + g + 8) * LF + j] = kk[nb][2];
      KKf[(m0 + g + 8) * LF + j + 1] = kk[nb][3];
    }
  }
  __syncthreads();
  // dÂ = −(Tᵀ·Y) ⊙ e^{G_i−G_j}, strictly lower rows of the chunk. T_mi = 0 for m < i: k starts at the tile.
  float da[4][4];
  {
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    zero(da);
    warp_mma<4, true, true>(da, Tb, LC, m0, Yb, LC, n0, m0, C);
  }
  __syncthreads();  // Y is read by all warps before its buffer takes diag(β)·dÂ
  {
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const int j = n0 + 8 * nb + 2 * t4;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          x[e] = (i > j + e && i < cr.len) ? -da[nb][2 * hf + e] * expf(G[i] - G[j + e]) : 0.f;
        dAf[i * LF + j] = x[0];
        dAf[i * LF + j + 1] = x[1];
        st_bf16x2(Yb + i * LC + j, B[i] * x[0], B[i] * x[1]);
      }
    }
  }
  __syncthreads();
  {
    // Warp tile rows 16wr..+15 x columns (DK/2)·wc..: Xw = Tᵀ·dW, Xu = Tᵀ·dU and
    // dK̂ += diag(β)dÂ·K̂ + (diag(β)dÂ)ᵀ·K̂ (row i of diag(β)dÂ is zero past the diagonal: j < i only).
    const int wc = warp >> 2, m0 = 16 * (warp & 3), n0 = (DK / 2) * wc;
    constexpr int NH = NB;  // DK/2 columns
    float xw[NH][4], xu[NH][4], dk2[NH][4];
    zero(xw);
    zero(xu);
    zero(dk2);
    warp_mma<NH, true, true>(xw, Tb, LC, m0, dWb, LK, n0, m0, C);
    warp_mma<NH, true, true>(xu, Tb, LC, m0, dUb, LV, n0, m0, C);
    warp_mma<NH, false, true>(dk2, Yb, LC, m0, Kb, LK, n0, 0, m0 + 16);
    warp_mma<NH, true, true>(dk2, Yb, LC, m0, Kb, LK, n0, m0, C);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      const bool ok = i < cr.len;
      const float bi = B[i], bg = bi * expf(G[i]);
      const int64_t t = cr.t0 + i;
      float sw = 0.f, su = 0.f;
      if (ok) {
#pragma unroll
        for (int nb = 0; nb < NH; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int d = n0 + 8 * nb + 2 * t4 + e;
            const int64_t o = (t * HV + h) * DK + d, vo = (t * HV + h) * DV + d;
            const float w = xw[nb][2 * hf + e], u = xu[nb][2 * hf + e];
            dkh[o] += bg * w + dk2[nb][2 * hf + e];
            sw += w * kn[(t * HK + hk) * DK + d];
            st(dv_out, vo, bi * u);
            su += u * ld(v, vo);
          }
      }
      sw = gdn_chunk::quad_sum(sw);
      su = gdn_chunk::quad_sum(su);
      if (t4 == 0) {
        xwk[wc * C + i] = sw;
        xuv[wc * C + i] = su;
      }
    }
  }
  __syncthreads();
  for (int i = warp; i < cr.len; i += NT / 32) {
    float ra = 0.f, ca = 0.f;
    for (int j = lane; j < cr.len; j += 32) {
      if (j < i) ra += dAf[i * LF + j] * KKf[i * LF + j];
      if (j > i) ca += B[j] * dAf[j * LF + i] * KKf[j * LF + i];
    }
    ra = warp_sum(ra);
    ca = warp_sum(ca);
    if (lane == 0) {
      const int64_t t = cr.t0 + i;
      const float bi = B[i], gi = expf(G[i]);
      const float xw = xwk[i] + xwk[C + i], xu = xuv[i] + xuv[C + i];
      dbeta[t * HV + h] = xu + gi * xw + ra;
      dGv[i] = dg[t * HV + h] + bi * gi * xw + bi * ra - ca;
    }
  }
  __syncthreads();
  if (tid == 0) gdn_chunk::store_reverse_cumsum(dGv, dg, cr, HV, h);  // dg_t = Σ_{m ≥ t in this chunk} dG_m
}

}  // namespace

bool gdn_chunk_mma_supported(int dk, int dv) { return dk == 128 && dv == 128; }

size_t gdn_chunk_bwd_mma_smem(int dk, int dv) {
  if (!gdn_chunk_mma_supported(dk, dv)) return 0;
  size_t m = state_grad_mma_smem<128, 128>();
  for (size_t b : {intra_grad_mma_smem<128, 128>(), wy_grad_mma_smem<128, 128>()}) m = b > m ? b : m;
  return m;
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (gdn/emu)
cudaError_t launch_gdn_state_grad_mma(KIn dout, const float* kn, const float* Gc, const int32_t* chunks, int nchunks,
                                      const float* states, const float* dh, const float* vnew, const float* dvn,
                                      float* dqh, float* dkh, float* dW, float* gsum, int64_t HK, int64_t HV, int dk,
                                      int dv, cudaStream_t s) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  auto* kern = gdn_chunk_state_grad_mma_kernel<128, 128>;
  const size_t smem = state_grad_mma_smem<128, 128>();
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), NT, smem, s>>>(
      dout, kn, Gc, chunks, states, dh, vnew, dvn, dqh, dkh, dW, gsum, HK, HV);
  return cudaGetLastError();
}

cudaError_t launch_gdn_intra_grad_mma(KIn dout, const float* qn, const float* kn, const float* Gc,
                                      const int32_t* chunks, int nchunks, const float* vnew, const float* gsum,
                                      float* dqh, float* dkh, float* dg, int64_t HK, int64_t HV, int dk, int dv,
                                      cudaStream_t s) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  auto* kern = gdn_chunk_intra_grad_mma_kernel<128, 128>;
  const size_t smem = intra_grad_mma_smem<128, 128>();
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), NT, smem, s>>>(
      dout, qn, kn, Gc, chunks, vnew, gsum, dqh, dkh, dg, HK, HV);
  return cudaGetLastError();
}

cudaError_t launch_gdn_wy_grad_mma(const float* kn, KIn v, KIn beta, const float* Gc, const int32_t* chunks,
                                   int nchunks, const float* Tm, const float* dW, const float* dvn, float* dkh,
                                   KOut dv_out, float* dg, float* dbeta, int64_t HK, int64_t HV, int dk, int dv,
                                   cudaStream_t s) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  auto* kern = gdn_chunk_wy_grad_mma_kernel<128, 128>;
  const size_t smem = wy_grad_mma_smem<128, 128>();
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), NT, smem, s>>>(
      kn, v, beta, Gc, chunks, Tm, dW, dvn, dkh, dv_out, dg, dbeta, HK, HV);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
