// Varlen GQA attention backward on tensor cores, same contract as attention_bwd_fma.cu. With
// s_ij = scale·q_i·k_j (j ≤ i when causal, else every j of the sequence), p_ij = exp(s_ij − lse_i), D_i = do_i·o_i:
//   dv_j = Σ_i p_ij·do_i     dp_ij = do_i·v_j     ds_ij = p_ij·(dp_ij − D_i)
//   dq_i = scale·Σ_j ds_ij·k_j                     dk_j = scale·Σ_i ds_ij·q_i
// Kernels (bf16 mma.sync, fp32 accumulators; P and dS rounded to bf16 as operands, as FA2 does):
//  1. D per (token, head) (launch_attention_dot, shared with the FMA path).
//  2. dK/dV: one block of 8 warps per (query head, 64-key tile) walks the 64-query tiles of its sequence
//     from the diagonal on (causal) or from the sequence start (full attention). Per query tile: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (warp (wr, wc) owns keys 16wr..+15 x
//     queries 32wc..+31), Pᵀ and dSᵀ go to shared memory as bf16, then dV += Pᵀ·dO and dK += dSᵀ·Q (warp
//     owns keys 16wr..+15 x head dims wc·hd/2..+hd/2-1, accumulated in registers over the whole walk).
//     With GQA each query head writes fp32 partials, summed per kv head by a small kernel (deterministic,
//     no atomics, and nH blocks per key tile keep the GPU busy where nKV would not).
//  3. dQ: one block of 4 warps per (head, 64-query tile) walks the key tiles up to the diagonal like the
//     forward (all key tiles of the sequence when full): S = Q·Kᵀ, dP = dO·Vᵀ, dS from registers as the A operand of dQ += dS·K.
// S and dP are computed in both 2 and 3 (7 products instead of FA2's 5) in exchange for no dQ atomics.
// Under the Hopper policy at head_dim 256 with nH / nKV even, 2 and 3 run on wgmma (attention_dkdv_wgmma.cu,
// attention_dq_wgmma.cu).
#include <cmath>

#include "attention/attention.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/device.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int BT = kAttnMmaTile;  // rows of the owned tile (keys in dK/dV, queries in dQ) and walked query tiles
template <int HD> constexpr int row_ld() { return HD + 8; }  // +16 bytes: conflict-free ldmatrix rows

// ---- dK / dV ------------------------------------------------------------------------------------------------
constexpr int KV_NT = 256;  // 8 warps
// Query rows walked per step: 64 (the Hopper policy), or 16 at hd 256 under the portable policy, where 64-row
// Q and dO tiles next to the 64-row K and V tiles would need 150-217 KiB (kernels/common/kernel_policy.h:
// every portable kernel fits 99 KiB). With 16 rows each warp column takes 8 queries in phase 1.
template <int QW> constexpr int p_ld() { return QW + 8; }  // Pᵀ / dSᵀ row stride (bf16)
// Q/dO buffers: with 64-row steps at hd 256 (one block per SM) the next query tile loads while this one is
// computed; the other configurations run on a single buffer.
template <int HD, int QW> constexpr int kv_stages() { return HD == 256 && QW == 64 ? 2 : 1; }
template <int HD, int QW> constexpr size_t dkdv_smem() {
  return sizeof(bf16) * (size_t(2) * BT * row_ld<HD>() + size_t(2 * kv_stages<HD, QW>()) * QW * row_ld<HD>() +
                         size_t(2) * BT * p_ld<QW>()) +
         sizeof(float) * 2 * QW;
}
// The portable policy's step at each head dim: 64 rows where that fits 99 KiB (hd 64, 128), else 16.
template <int HD> constexpr int portable_qw() { return dkdv_smem<HD, BT>() <= kPortableSmemPerBlock ? BT : 16; }
static_assert(dkdv_smem<256, portable_qw<256>()>() <= kPortableSmemPerBlock, "portable dK/dV tile over 99 KiB");

template <int HD, int QW, bool CAUSAL>
__global__ void __launch_bounds__(KV_NT, 1) attention_dkdv_mma_kernel(
    const bf16* __restrict__ dout, const bf16* __restrict__ q,  // (T, nH, HD)
    const bf16* __restrict__ k, const bf16* __restrict__ v,     // (T, nKV, HD)
    const float* __restrict__ lse, const float* __restrict__ dl,  // (T, nH)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int64_t T, int nH, int nKV, float scale,
    KOut dk, KOut dv,            // (T, nKV, HD), written when part == nullptr
    float* __restrict__ part) {  // F32 (2, T, nH, HD) partials when nH > nKV
  static_assert(QW == BT || QW == 16, "query steps of 64 or 16 rows");
  constexpr int LD = row_ld<HD>();
  constexpr int PLD = p_ld<QW>();
  constexpr int HH = HD / 2;  // head dims per warp column
  constexpr int NA = HH / 8;  // 8-wide column blocks of the dK / dV accumulators
  constexpr int NQ = QW / 2;  // queries per warp column in phase 1
  constexpr int NB = NQ / 8;  // their 8-wide blocks
  constexpr int ST = kv_stages<HD, QW>();
  constexpr uint32_t STAGE_BYTES = 2 * QW * LD * sizeof(bf16);  // one Q + dO buffer pair
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Ks = reinterpret_cast<bf16*>(smem_raw);  // (BT, LD)
  bf16* Vs = Ks + BT * LD;
  bf16* Pt = Vs + BT * LD;                        // (BT keys, PLD) Pᵀ
  bf16* St = Pt + BT * PLD;                       // dSᵀ
  float* Ls = reinterpret_cast<float*>(St + BT * PLD);  // (QW) lse·log2e of the query tile
  float* Ds = Ls + QW;                                   // (QW) D
  bf16* Qs = reinterpret_cast<bf16*>(Ds + QW);    // stage 0: Q (QW, LD) then dO (QW, LD); stage 1 follows
  bf16* Os = Qs + QW * LD;

  const int h = blockIdx.x;
  const int seq = tiles[2 * blockIdx.y], k0 = tiles[2 * blockIdx.y + 1];
  const int s1 = cu[seq + 1];
  const int qstart = CAUSAL ? k0 : cu[seq];  // the first query tile that sees this key tile
  const int kvh = h / (nH / nKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int wr = warp & 3, wc = warp >> 2;
  const float sl2 = scale * kLog2e;

  mma::load_rows<BT, HD, LD, KV_NT>(Ks, k, k0, s1, nKV, kvh);
  mma::load_rows<BT, HD, LD, KV_NT>(Vs, v, k0, s1, nKV, kvh);
  mma::load_rows<QW, HD, LD, KV_NT>(Qs, q, qstart, s1, nH, h);  // the first query tile
  mma::load_rows<QW, HD, LD, KV_NT>(Os, dout, qstart, s1, nH, h);
  mma::cp_async_commit();

  float adk[NA][4], adv[NA][4];
#pragma unroll
  for (int i = 0; i < NA; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) adk[i][e] = adv[i][e] = 0.f;

  // Phase 1 operands: A = K or V rows of this warp, B = Q or dO rows (n = queries, k = head dim).
  const int a_off = (wr * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
  const uint32_t ka = mma::smem_addr(Ks + a_off), va = mma::smem_addr(Vs + a_off);
  // 64-row steps: rows of two 8-query blocks x 16 dims; 16-row steps: rows of one 8-query block x 32 dims.
  const int b_off = QW == BT ? (wc * NQ + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8
                             : (wc * NQ + (lane & 7)) * LD + (lane >> 3) * 8;
  const uint32_t qb = mma::smem_addr(Qs + b_off), ob = mma::smem_addr(Os + b_off);
  // Phase 2 operands: A = Pᵀ or dSᵀ rows of this warp (k = queries), B = dO or Q (k = queries, n = dims).
  const int p_off = (wr * 16 + (lane & 15)) * PLD + (lane >> 4) * 8;
  const uint32_t pa = mma::smem_addr(Pt + p_off), sa = mma::smem_addr(St + p_off);
  const int t_off = (lane & 15) * LD + wc * HH + (lane >> 4) * 8;
  const uint32_t ot = mma::smem_addr(Os + t_off), qt = mma::smem_addr(Qs + t_off);
  const int key0 = k0 + wr * 16 + g;  // key of c0/c1 in phase 1 and of the accumulators; c2/c3: key0 + 8

  int stage = 0;
  for (int q0 = qstart; q0 < s1; q0 += QW, stage ^= ST - 1) {
    const bool more = q0 + QW < s1;
    if (ST == 1 && q0 != qstart) {  // single buffer: load this tile now (the previous one is done with it)
      mma::load_rows<QW, HD, LD, KV_NT>(Qs, q, q0, s1, nH, h);
      mma::load_rows<QW, HD, LD, KV_NT>(Os, dout, q0, s1, nH, h);
      mma::cp_async_commit();
    }
    if (ST == 2 && more) {  // prefetch the next tile into the other stage (read last by the previous tile)
      bf16* qn = Qs + (stage ^ 1) * 2 * QW * LD;
      mma::load_rows<QW, HD, LD, KV_NT>(qn, q, q0 + QW, s1, nH, h);
      mma::load_rows<QW, HD, LD, KV_NT>(qn + QW * LD, dout, q0 + QW, s1, nH, h);
      mma::cp_async_commit();
    }
    if (threadIdx.x < QW) {
      const int64_t i = q0 + threadIdx.x;
      Ls[threadIdx.x] = i < s1 ? lse[i * nH + h] * kLog2e : 0.f;
      Ds[threadIdx.x] = i < s1 ? dl[i * nH + h] : 0.f;
    }
    if (ST == 2 && more) mma::cp_async_wait<1>();  // this tile's group is done, the prefetch may run on
    else mma::cp_async_wait<0>();
    __syncthreads();
    const uint32_t soff = stage * STAGE_BYTES;

    float s[NB][4], dp[NB][4];
#pragma unroll
    for (int i = 0; i < NB; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
    if constexpr (QW == BT) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t ak[4], av[4];
        mma::ldsm_x4(ak, ka + kk * 32);
        mma::ldsm_x4(av, va + kk * 32);
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          uint32_t b[4];
          mma::ldsm_x4(b, qb + soff + (nb * 16 * LD + kk * 16) * 2);
          mma::mma16816(s[2 * nb], ak, b[0], b[1]);
          mma::mma16816(s[2 * nb + 1], ak, b[2], b[3]);
          mma::ldsm_x4(b, ob + soff + (nb * 16 * LD + kk * 16) * 2);
          mma::mma16816(dp[2 * nb], av, b[0], b[1]);
          mma::mma16816(dp[2 * nb + 1], av, b[2], b[3]);
        }
      }
    } else {  // one 8-query block: each ldmatrix x4 gives its B fragments for two 16-dim steps
#pragma unroll
      for (int kk = 0; kk < HD / 16; kk += 2) {
        uint32_t ak[4], av[4], b[4];
        mma::ldsm_x4(b, qb + soff + kk * 32);
        mma::ldsm_x4(ak, ka + kk * 32);
        mma::mma16816(s[0], ak, b[0], b[1]);
        mma::ldsm_x4(ak, ka + (kk + 1) * 32);
        mma::mma16816(s[0], ak, b[2], b[3]);
        mma::ldsm_x4(b, ob + soff + kk * 32);
        mma::ldsm_x4(av, va + kk * 32);
        mma::mma16816(dp[0], av, b[0], b[1]);
        mma::ldsm_x4(av, va + (kk + 1) * 32);
        mma::mma16816(dp[0], av, b[2], b[3]);
      }
    }
    // Pᵀ, dSᵀ; masking only on the query tiles that overlap the key tile (causal: the first BT / QW) and on
    // a tile running past the sequence end (keys past it only reach dK/dV rows that are never written).
    const bool masked = (CAUSAL && q0 < k0 + BT) || q0 + QW > s1;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int c = wc * NQ + nb * 8 + 2 * tq;  // query column of e = 0 and 2 (e = 1, 3: c + 1)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int cc = c + (e & 1), key = key0 + (e >> 1) * 8, i = q0 + cc;
        const bool valid = !masked || ((!CAUSAL || key <= i) && i < s1);
        const float p = valid ? exp2f(fmaf(s[nb][e], sl2, -Ls[cc])) : 0.f;
        s[nb][e] = p;
        dp[nb][e] = p * (dp[nb][e] - Ds[cc]);
      }
      const int r0 = (wr * 16 + g) * PLD + c, r1 = r0 + 8 * PLD;
      *reinterpret_cast<uint32_t*>(Pt + r0) = mma::pack_bf16(s[nb][0], s[nb][1]);
      *reinterpret_cast<uint32_t*>(Pt + r1) = mma::pack_bf16(s[nb][2], s[nb][3]);
      *reinterpret_cast<uint32_t*>(St + r0) = mma::pack_bf16(dp[nb][0], dp[nb][1]);
      *reinterpret_cast<uint32_t*>(St + r1) = mma::pack_bf16(dp[nb][2], dp[nb][3]);
    }
    __syncthreads();

#pragma unroll
    for (int kc = 0; kc < QW / 16; ++kc) {
      uint32_t ap[4], as[4];
      mma::ldsm_x4(ap, pa + kc * 32);
      mma::ldsm_x4(as, sa + kc * 32);
#pragma unroll
      for (int db = 0; db < NA / 2; ++db) {
        uint32_t b[4];
        mma::ldsm_x4_t(b, ot + soff + (kc * 16 * LD + db * 16) * 2);
        mma::mma16816(adv[2 * db], ap, b[0], b[1]);
        mma::mma16816(adv[2 * db + 1], ap, b[2], b[3]);
        mma::ldsm_x4_t(b, qt + soff + (kc * 16 * LD + db * 16) * 2);
        mma::mma16816(adk[2 * db], as, b[0], b[1]);
        mma::mma16816(adk[2 * db + 1], as, b[2], b[3]);
      }
    }
    __syncthreads();  // before the next tile overwrites Q, dO (this stage), Pᵀ, dSᵀ, Ls, Ds
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = key0 + r * 8;
    if (key >= s1) continue;
#pragma unroll
    for (int na = 0; na < NA; ++na) {
      const int d = wc * HH + na * 8 + 2 * tq;
      const float k0v = scale * adk[na][2 * r], k1v = scale * adk[na][2 * r + 1];
      const float v0v = adv[na][2 * r], v1v = adv[na][2 * r + 1];
      if (part) {
        const int64_t i = (key * nH + h) * HD + d;
        *reinterpret_cast<float2*>(part + i) = make_float2(k0v, k1v);
        *reinterpret_cast<float2*>(part + T * nH * HD + i) = make_float2(v0v, v1v);
      } else {
        const int64_t i = (key * nKV + kvh) * HD + d;
        st(dk, i, k0v);
        st(dk, i + 1, k1v);
        st(dv, i, v0v);
        st(dv, i + 1, v1v);
      }
    }
  }
}

// out[t, gk, d] (=) Σ over the query heads h of kv head gk of part[t, h, d].
__global__ void attn_group_sum_kernel(const float* __restrict__ part, int64_t T, int nH, int nKV, int hd, KOut out) {
  const int rep = nH / nKV;
  const int64_t n = T * nKV * hd;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / (int64_t(nKV) * hd), rem = idx % (int64_t(nKV) * hd);
    const int gk = static_cast<int>(rem / hd), d = static_cast<int>(rem % hd);
    const float* p = part + (t * nH + int64_t(gk) * rep) * hd + d;
    float acc = 0.f;
    for (int r = 0; r < rep; ++r) acc += p[int64_t(r) * hd];
    st(out, idx, acc);
  }
}

// ---- dQ -----------------------------------------------------------------------------------------------------
constexpr int Q_NT = 128;  // 4 warps, 16 query rows each
template <int HD> constexpr int dq_bk() { return HD == 256 ? 32 : 64; }  // 2 blocks per SM at hd 256
template <int HD> constexpr size_t dq_smem() {
  return sizeof(bf16) * size_t(2 * BT + 2 * dq_bk<HD>()) * row_ld<HD>();
}

template <int HD, bool CAUSAL>
__global__ void __launch_bounds__(Q_NT, 2) attention_dq_mma_kernel(
    const bf16* __restrict__ dout, const bf16* __restrict__ q,  // (T, nH, HD)
    const bf16* __restrict__ k, const bf16* __restrict__ v,     // (T, nKV, HD)
    const float* __restrict__ lse, const float* __restrict__ dl,  // (T, nH)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int nH, int nKV, float scale,
    KOut dq) {  // (T, nH, HD)
  constexpr int LD = row_ld<HD>();
  constexpr int BK = dq_bk<HD>();
  constexpr int NS = BK / 8;
  constexpr int ND = HD / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);  // (BT, LD)
  bf16* Os = Qs + BT * LD;                        // dO (BT, LD)
  bf16* Ks = Os + BT * LD;                        // (BK, LD)
  bf16* Vs = Ks + BK * LD;                        // (BK, LD)

  const int h = blockIdx.x;
  const int seq = tiles[2 * blockIdx.y], q0 = tiles[2 * blockIdx.y + 1];
  const int s0 = cu[seq], s1 = cu[seq + 1];
  const int kvh = h / (nH / nKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const float sl2 = scale * kLog2e;

  mma::load_rows<BT, HD, LD, Q_NT>(Qs, q, q0, s1, nH, h);
  mma::load_rows<BT, HD, LD, Q_NT>(Os, dout, q0, s1, nH, h);
  mma::load_rows<BK, HD, LD, Q_NT>(Ks, k, s0, s1, nKV, kvh);
  mma::cp_async_commit();
  mma::load_rows<BK, HD, LD, Q_NT>(Vs, v, s0, s1, nKV, kvh);
  mma::cp_async_commit();

  const int row0 = q0 + warp * 16 + g;  // token of c0/c1; c2/c3: row0 + 8
  float lrow[2], drow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + r * 8;
    lrow[r] = row < s1 ? lse[row * nH + h] * kLog2e : 0.f;
    drow[r] = row < s1 ? dl[row * nH + h] : 0.f;
  }
  float acc[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  const int a_off = (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
  const uint32_t qa = mma::smem_addr(Qs + a_off), oa = mma::smem_addr(Os + a_off);
  const int b_off = ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
  const uint32_t kb = mma::smem_addr(Ks + b_off), vb = mma::smem_addr(Vs + b_off);
  const uint32_t kt = mma::smem_addr(Ks + (lane & 15) * LD + (lane >> 4) * 8);

  const int kend = CAUSAL ? min(q0 + BT, s1) : s1;
  for (int k0 = s0; k0 < kend; k0 += BK) {
    mma::cp_async_wait<1>();
    __syncthreads();  // K_j (and Q, dO) landed
    float s[NS][4], dp[NS][4];
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[4];
      mma::ldsm_x4(a, qa + kk * 32);
#pragma unroll
      for (int nb = 0; nb < NS / 2; ++nb) {
        uint32_t b[4];
        mma::ldsm_x4(b, kb + (nb * 16 * LD + kk * 16) * 2);
        mma::mma16816(s[2 * nb], a, b[0], b[1]);
        mma::mma16816(s[2 * nb + 1], a, b[2], b[3]);
      }
    }
    mma::cp_async_wait<0>();
    __syncthreads();  // V_j landed
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[4];
      mma::ldsm_x4(a, oa + kk * 32);
#pragma unroll
      for (int nb = 0; nb < NS / 2; ++nb) {
        uint32_t b[4];
        mma::ldsm_x4(b, vb + (nb * 16 * LD + kk * 16) * 2);
        mma::mma16816(dp[2 * nb], a, b[0], b[1]);
        mma::mma16816(dp[2 * nb + 1], a, b[2], b[3]);
      }
    }
    // Some key of the tile may lie past the first query row (causal) or past the sequence end.
    const bool masked = CAUSAL ? k0 + BK - 1 > q0 : k0 + BK > s1;
#pragma unroll
    for (int nb = 0; nb < NS; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, col = k0 + nb * 8 + 2 * tq + (e & 1), row = row0 + r * 8;
        const bool valid = !masked || (CAUSAL ? col <= row && row < s1 : col < s1);
        const float p = valid ? exp2f(fmaf(s[nb][e], sl2, -lrow[r])) : 0.f;
        s[nb][e] = p * (dp[nb][e] - drow[r]);  // dS
      }
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      uint32_t a[4];
      mma::c_to_a(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int db = 0; db < ND / 2; ++db) {
        uint32_t b[4];
        mma::ldsm_x4_t(b, kt + (kc * 16 * LD + db * 16) * 2);
        mma::mma16816(acc[2 * db], a, b[0], b[1]);
        mma::mma16816(acc[2 * db + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with K_j and V_j
    if (k0 + BK < kend) {
      mma::load_rows<BK, HD, LD, Q_NT>(Ks, k, k0 + BK, s1, nKV, kvh);
      mma::cp_async_commit();
      mma::load_rows<BK, HD, LD, Q_NT>(Vs, v, k0 + BK, s1, nKV, kvh);
      mma::cp_async_commit();
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + r * 8;
    if (row >= s1) continue;
    const int64_t base = (row * nH + h) * HD + 2 * tq;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      st(dq, base + nd * 8, scale * acc[nd][2 * r]);
      st(dq, base + nd * 8 + 1, scale * acc[nd][2 * r + 1]);
    }
  }
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/attention/attention_emu.cpp)
template <int HD, int QW, bool CAUSAL>
cudaError_t run_bwd(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse, const float* dl, const int32_t* cu,
                    const int32_t* q_tiles, const int32_t* k_tiles, int ntiles, int64_t T, int64_t nH, int64_t nKV,
                    float scale, KOut dq, KOut dk, KOut dv, float* part, cudaStream_t s) {
  const auto* dop = static_cast<const bf16*>(dout.p);
  const auto* qp = static_cast<const bf16*>(q.p);
  const auto* kp = static_cast<const bf16*>(k.p);
  const auto* vp = static_cast<const bf16*>(v.p);
  const int nh = static_cast<int>(nH), nkv = static_cast<int>(nKV);
  // Heads vary fastest so the first-launched blocks are the host's most expensive tiles, in all heads.
  const dim3 grid(static_cast<unsigned>(nH), static_cast<unsigned>(ntiles));

  // dK/dV: per query head (mma.sync) or per head pair (wgmma) partials when they do not cover a kv group.
  int64_t part_heads = nH > nKV ? nH : 0;
  cudaError_t e;
  if (HD == 256 && pol.hopper() && attention_dkdv_wgmma_supported(HD, nH, nKV)) {
    e = launch_attention_dkdv_wgmma(pol, dout, q, k, v, lse, dl, cu, k_tiles, ntiles, T, nH, nKV, HD, scale, CAUSAL,
                                    dk, dv, part, s);
    part_heads = 0;  // the kernel sums its partials per kv head itself
  } else {
    constexpr size_t kv_smem = dkdv_smem<HD, QW>();
    e = set_launch_smem(pol, attention_dkdv_mma_kernel<HD, QW, CAUSAL>, kv_smem);
    if (e != cudaSuccess) return e;
    attention_dkdv_mma_kernel<HD, QW, CAUSAL><<<grid, KV_NT, kv_smem, s>>>(
        dop, qp, kp, vp, lse, dl, cu, k_tiles, T, nh, nkv, scale, dk, dv, part_heads ? part : nullptr);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return e;
  if (part_heads) {
    const int64_t n = T * nKV * HD;
    const int ph = static_cast<int>(part_heads);
    attn_group_sum_kernel<<<grid_for(n, 256), 256, 0, s>>>(part, T, ph, nkv, HD, dk);
    attn_group_sum_kernel<<<grid_for(n, 256), 256, 0, s>>>(part + T * part_heads * HD, T, ph, nkv, HD, dv);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }

  if (HD == 256 && pol.hopper() && attention_dq_wgmma_supported(HD, nH, nKV))
    return launch_attention_dq_wgmma(pol, dout, q, k, v, lse, dl, cu, q_tiles, ntiles, T, nH, nKV, HD, scale,
                                     CAUSAL, dq, s);
  e = set_launch_smem(pol, attention_dq_mma_kernel<HD, CAUSAL>, dq_smem<HD>());
  if (e != cudaSuccess) return e;
  attention_dq_mma_kernel<HD, CAUSAL><<<grid, Q_NT, dq_smem<HD>(), s>>>(dop, qp, kp, vp, lse, dl, cu, q_tiles, nh, nkv,
                                                                 scale, dq);
  return cudaGetLastError();
}

#endif  // DT_ATTN_EMU
}  // namespace

// The dK/dV step: 64 query rows with the Hopper policy, else the portable step of the head dim.
template <int HD> constexpr size_t dkdv_smem_for(bool hopper) {
  return hopper ? dkdv_smem<HD, BT>() : dkdv_smem<HD, portable_qw<HD>()>();
}

size_t attention_bwd_mma_smem(const KernelPolicy& pol, int hd) {
  const bool hop = pol.hopper();
  const size_t a = hd <= 64    ? dkdv_smem_for<64>(hop)
                   : hd <= 96  ? dkdv_smem_for<96>(hop)
                   : hd <= 128 ? dkdv_smem_for<128>(hop)
                               : dkdv_smem_for<256>(hop);
  size_t b = hd <= 64 ? dq_smem<64>() : hd <= 96 ? dq_smem<96>() : hd <= 128 ? dq_smem<128>() : dq_smem<256>();
#ifndef DT_ATTN_EMU
  if (hop && hd > 128 && attention_dq_wgmma_smem(hd) > b) b = attention_dq_wgmma_smem(hd);  // where they apply
  if (hop && hd > 128 && attention_dkdv_wgmma_smem(hd) > b) b = attention_dkdv_wgmma_smem(hd);
#endif
  return a > b ? a : b;
}

#ifndef DT_ATTN_EMU
cudaError_t launch_attention_bwd_mma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, KIn o, const float* lse, float* dl,
                                     const int32_t* cu_seqlens, const int32_t* q_tiles, const int32_t* k_tiles,
                                     int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
                                     KOut dq, KOut dk, KOut dv, float* dkv_scratch, cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  if (dout.t != KType::BF16 || q.t != KType::BF16 || k.t != KType::BF16 || v.t != KType::BF16 ||
      !attention_mma_supported(hd) || (nH > nKV && dkv_scratch == nullptr))
    return cudaErrorInvalidValue;
  cudaError_t e = launch_attention_dot(dout, o, dl, T * nH, hd, s);
  if (e != cudaSuccess) return e;
  // Hopper: 64-row query steps at every head dim; portable: the step that fits 99 KiB (portable_qw).
  const bool hop = pol.hopper();
  auto run = [&]<int HD>() {
    auto go = [&]<int QW>() {
      return (causal ? run_bwd<HD, QW, true> : run_bwd<HD, QW, false>)(pol, dout, q, k, v, lse, dl, cu_seqlens,
                                                                        q_tiles, k_tiles, ntiles, T, nH, nKV, scale,
                                                                        dq, dk, dv, dkv_scratch, s);
    };
    return hop ? go.template operator()<BT>() : go.template operator()<portable_qw<HD>()>();
  };
  switch (hd) {
    case 64: return run.template operator()<64>();
    case 96: return run.template operator()<96>();
    case 128: return run.template operator()<128>();
    default: return run.template operator()<256>();
  }
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
