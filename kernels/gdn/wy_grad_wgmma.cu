// The chunked GDN backward's WY kernel (the contract of gdn_chunk_wy_grad_mma_kernel<128, 128, true>,
// chunk_wy_mma.cu: bf16 k with ρ_k, bf16 v, dk = dv = 128) on Hopper's warpgroup tensor cores (wgmma) with
// its tiles brought by TMA (sm_90a). Per work item (chunk, value head), the same formulas with K̂ = diag(ρ)·k:
//   [1] a = dW·kᵀ, b = dU·Vᵀ (m64n32 per warpgroup); dT = (diag(ρ)a·diag(γ) + b)·diag(β) -> bf16 tile P;
//       the row dots Xw_j·K̂_j = Σ_m T_mj ρ_j a_mj and Xu_j·V_j = Σ_m T_mj b_mj as column sums
//   [2] Y = dT·Tᵀ -> bf16 tile Y
//   [3] dÂ = −tril(Tᵀ·Y ⊙ e^{G_i−G_j}) and k·kᵀ (K̂K̂ᵀ = diag(ρ)·k·kᵀ·diag(ρ)): ra_i = Σ_j dÂ_ij (K̂K̂ᵀ)_ij,
//       ca_j = Σ_i β_i dÂ_ij (K̂K̂ᵀ)_ij; P1 = diag(β)dÂ·diag(ρ), P2 = diag(ρβ)dÂ as bf16 tiles
//   [4] Xw = Tᵀ·dW, Z = P1·k + P2ᵀ·k (= diag(β)dÂ·K̂ + (diag(β)dÂ)ᵀ·K̂), Xu = Tᵀ·dU (m64n64 per warpgroup):
//       dk̂ (=) dk̂ partial + diag(βγ)Xw + Z, dv (=) diag(β)Xu
//   [5] dβ, dG per row (8 rows per consumer warp) and their reverse cumsum within the chunk (one warp, during
//       the next item's Y product), as chunk_wy_mma.cu
//   with dk (GdnBwdBf16::dk): the value heads of a key head back to back in one block; each head's dk̂ goes
//   into the next head's partial-sum tile (bf16, in shared memory), and the last head forms dk itself, the L2
//   norm's backward (l2norm.cu) with the row dots exchanged between the two warps that hold a row.
// k enters every product exactly (bf16), ρ in fp32 epilogues or in the bf16 rounding of P1, P2 (the mma.sync
// kernel rounds K̂ = ρk to bf16 instead). Cross-warp partial sums go through fixed slots, summed in a fixed
// order: bit-reproducible.
//
// Pipeline (a persistent grid of one block per SM: two consumer warpgroups and a producer warp): the item's
// six tiles (dW, dV', V, k, the dk̂ partial sums: 64 x 128; T: 64 x 64) and per-row values (G, β, γ, dg, ρ_k
// and the gate factor) in two sets by item parity, filled by the producer warp (tiles by TMA from one lane)
// as soon as the consumers release a set (mbarriers full/empty per set), so the next item's loads are in
// flight during an item and no consumer issues a copy or waits on a global load. The consumers meet at three
// named barriers per item (dT, Y, P1/P2 complete; a fourth, per warp pair, for the fused dk's row dots);
// products that depend on the tiles alone (k·kᵀ, Xu, Xw) run while the epilogues before them do. Every tile
// is 32-byte swizzled (wgmma_tiles.cuh) and serves as a K-major or an MN-major operand. Rows past a chunk's
// end come in as the next sequence's: β is zero there (dT's columns, P), dT's rows are masked, T's identity
// rows past the end meet them in the column sums and in Tᵀ·X, and the stores stop at the chunk's end.
#include <cstdlib>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/bf16_words.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/div_by.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_chunk::ChunkRef;
using gdn_wgmma::as_frags;
using gdn_wgmma::desc_at;
using gdn_wgmma::desc_k;
using gdn_wgmma::desc_mn;
using gdn_wgmma::mma_steps;
using gdn_wgmma::pack;
using gdn_wgmma::sw;
using gdn_words::ld_bf16x2;
using gdn_words::pair_at;
constexpr int C = kGdnChunk, D = 128, NT = 256;
constexpr uint32_t kRows = C * D * 2, kSq = C * C * 2;  // bytes of a 64 x 128 and of a 64 x 64 tile
constexpr int kVecs = 6, kSums = 14;                    // per-row vectors of an item, partial-sum rows

struct Smem {                                 // byte offsets
  static constexpr uint32_t dW = 0;           // in a set: dW [64][dk]
  static constexpr uint32_t dU = dW + kRows;  //   dV' [64][dv]
  static constexpr uint32_t V = dU + kRows;   //   V [64][dv]
  static constexpr uint32_t K = V + kRows;    //   k [64][dk] (before the norm)
  static constexpr uint32_t dF = K + kRows;   //   dk̂ partial sums [64][dk]
  static constexpr uint32_t T = dF + kRows;   //   T [64][64]
  static constexpr uint32_t set = T + kSq;    // [2] sets by item parity
  static constexpr uint32_t P = 2 * set;      // dT [64][64]
  static constexpr uint32_t Y = P + kSq;      // Y = dT·Tᵀ
  static constexpr uint32_t P1 = Y + kSq;     // diag(β)dÂ·diag(ρ)
  static constexpr uint32_t P2 = P1 + kSq;    // diag(ρβ)dÂ
  static constexpr uint32_t vec = P2 + kSq;   // [2][kVecs][64] fp32 by parity: G, β, γ = e^G, dg in, ρ_k,
                                              // dg -> da
  static constexpr uint32_t sums = vec + 2 * kVecs * C * 4;  // [2][kSums][64] by parity: xw[4], xu[4] per
                                                             // warp, ra[2], ca[4]
  static constexpr uint32_t rec = sums + 2 * kSums * C * 4;  // int [2] (t0, len), then [2] h, by parity
  static constexpr uint32_t tail = rec + 32;                 // [2] by parity: dG, gda [64] fp32; then [2][3]
                                                             // int (t0, len, h): step [5]'s suffix sums
  static constexpr uint32_t kdot = tail + 4 * C * 4 + 32;    // [2][64] fp32: the fused dk's row dots
  static constexpr uint32_t bar = kdot + 2 * C * 4;          // mbarriers full[2], empty[2]
  static constexpr uint32_t bytes = bar + 4 * 8;             // 224,864
};
static_assert(Smem::set % 1024 == 0 && Smem::bar % 8 == 0, "tile and mbarrier alignment");
constexpr uint32_t kSetBytes = 5 * kRows + kSq;

struct WyMaps {
  tma::ImageMap dW, dU, V, k, dF, T;
};

// One work item: (chunk, value head), value heads fastest.
struct WyItem {
  int ch, h;
  ChunkRef cr;
};
__device__ __forceinline__ WyItem wy_item(int item, const int32_t* chunks, const DivBy& by_hv) {
  WyItem it;
  it.ch = by_hv.div(item);
  it.h = item - it.ch * static_cast<int>(by_hv.d);
  it.cr = gdn_chunk::chunk_at(chunks, it.ch);
  return it;
}

__device__ __forceinline__ float exp2_approx(float x) {  // as chunk_grad_wgmma.cu
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// A warpgroup's m64n32 accumulators (columns c0 ..) as bf16 into a 64-row swizzled tile (stmatrix x4: lane
// 8i + rr gives row rr of matrix i = (column block, row half)).
__device__ __forceinline__ void store_tile32(uint32_t tile, const float (&d)[16], int c0) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, i = lane >> 3;
  const int row = 16 * wq + 8 * (i & 1) + (lane & 7);
#pragma unroll
  for (int jj = 0; jj < 2; ++jj)
    wgmma::stmatrix_x4(tile + sw<C>(row, c0 + 8 * (2 * jj + (i >> 1))), pack(d[8 * jj], d[8 * jj + 1]),
                       pack(d[8 * jj + 2], d[8 * jj + 3]), pack(d[8 * jj + 4], d[8 * jj + 5]),
                       pack(d[8 * jj + 6], d[8 * jj + 7]));
}

// Column sums of a warp's 16 x 32 accumulator tile v[2·nb + e] (column 8·nb + 2·t4 + e, summed over the
// thread's two rows already) over the warp's 16 rows, stored to dst[column] by one lane each (halving
// exchanges, as chunk_wy_mma.cu's column_sums8).
__device__ __forceinline__ void store_column_sums(float* dst, float (&v)[8]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0, h = 4; s < 3; ++s, h >>= 1) {
    const bool up = lane & (4 << s);
#pragma unroll
    for (int k = 0; k < h; ++k) {
      const float keep = up ? v[k + h] : v[k], give = up ? v[k] : v[k + h];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, give, 4 << s);
    }
  }
  const int g = lane >> 2, c = 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
  dst[8 * (c >> 1) + 2 * (lane & 3) + (c & 1)] = v[0];
}

__global__ void __launch_bounds__(NT + 32, 1)
    gdn_wy_grad_wgmma_kernel(const __grid_constant__ WyMaps maps, const float* rho_k, GdnGates gates,
                             const float* Gc, const int32_t* chunks, int nitems, bf16* dkh, KOut dv_out,
                             GdnGateGrads gr, int64_t HK, int64_t HV, KOut dk_out, DivBy by_r, DivBy by_hv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char gdn_smem[];
  // mbarriers by set: full (tiles and row values in), empty (the consumers are done with it)
  const uint32_t sb = mma::smem_addr(gdn_smem), full = sb + Smem::bar, empty = full + 16;
  const int tid = threadIdx.x, warp = tid >> 5, wq = warp & 3, lane = tid & 31;
  const int step = static_cast<int>(gridDim.x);
  // The block's n-th item: with dk fused, the r value heads of a key head (one chunk) back to back (a group),
  // groups blockIdx.x, + gridDim.x, ...; else r = 1. -1 past the block's last item.
  const int r = dk_out.p ? static_cast<int>(HV / HK) : 1, ngroups = nitems / r;
  auto item_at = [&](int n) {
    const int q = by_r.div(n), grp = static_cast<int>(blockIdx.x) + q * step;
    return grp < ngroups ? grp * r + (n - q * r) : -1;
  };
  if (tid == 0) {
    for (int p = 0; p < 2; ++p) {
      tma::mbar_init(full + 8 * p, 32);        // the producer's lanes (and the copies' bytes)
      tma::mbar_init(empty + 8 * p, NT / 32);  // the consumer warps
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  // [5] in two parts. row_terms (rows 8·warp .. + 7, one per lane < 8, once the item's sums are complete): dβ
  // and dG_i into the tail of set p, with the row's dg -> da factor and the chunk record (set p itself is
  // refilled once the consumers release it). row_suffix (one warp, during the next item): dg_i (=) Σ_{m ≥ i}
  // dG_m within the chunk, or da.
  float* tails = reinterpret_cast<float*>(gdn_smem + Smem::tail);  // [2][2][64] dG, gda; then [2][3] int
  auto row_terms = [&](int p, int64_t t0, int len, int h) {
    const float* vec = reinterpret_cast<const float*>(gdn_smem + Smem::vec) + p * kVecs * C;
    const float *B = vec + C, *Gam = vec + 2 * C, *dGin = vec + 3 * C, *Gda = vec + 5 * C;
    const float* sums = reinterpret_cast<const float*>(gdn_smem + Smem::sums) + p * kSums * C;
    const float *xws = sums, *xus = sums + 4 * C, *ras = sums + 8 * C, *cas = sums + 10 * C;
    const int i = 8 * warp + lane;
    float dG = 0.f;
    if (i < len) {
      const int64_t o = (t0 + i) * HV + h;
      const float bi = B[i], gi = Gam[i];
      const float xw_ = xws[i] + xws[C + i] + xws[2 * C + i] + xws[3 * C + i];
      const float xu_ = xus[i] + xus[C + i] + xus[2 * C + i] + xus[3 * C + i];
      const float ra_ = ras[i] + ras[C + i], ca_ = cas[i] + cas[C + i] + cas[2 * C + i] + cas[3 * C + i];
      const float dbeta = xu_ + gi * xw_ + ra_;
      if (gates.a.p)
        st(gr.db, o, gate_db(dbeta, bi));
      else
        st(gr.dbeta, o, dbeta);
      dG = dGin[i] + bi * gi * xw_ + bi * ra_ - ca_;
    }
    float* tail = tails + p * 2 * C;
    tail[i] = dG, tail[C + i] = Gda[i];
    if (i == 0) {
      int* rec = reinterpret_cast<int*>(tails + 4 * C) + 3 * p;
      rec[0] = static_cast<int>(t0), rec[1] = len, rec[2] = h;
    }
  };
  auto row_suffix = [&](int p) {  // one warp: rows i = 2·lane + r
    const float* tail = tails + p * 2 * C;
    const int* rec = reinterpret_cast<const int*>(tails + 4 * C) + 3 * p;
    const int64_t t0 = rec[0];
    const int len = rec[1], h = rec[2];
    float d[2] = {tail[2 * lane], tail[2 * lane + 1]};
    d[0] += d[1];
    const float after = gdn_chunk::later_lanes_sum(d[0]);  // the rows after this lane's
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * lane + r;
      if (i >= len) continue;
      const int64_t o = (t0 + i) * HV + h;
      if (gates.a.p)
        st(gr.da, o, (d[r] + after) * tail[C + i]);
      else
        gr.dg[o] = d[r] + after;
    }
  };

  if (warp == NT / 32) {
    // Producer warp: the item's tiles by TMA (lane 0), its chunk record and per-row values (rows lane, lane +
    // 32) into set p once the consumers have released it (the item two before).
    // The per-row values of item `it` (rows lane, lane + 32; zeros and γ = 1 past the chunk's end), loaded
    // one item ahead of their store so that a fill waits on no global load.
    struct Rows {
      float G[2], beta[2], dg[2], rho[2], gda[2];
    };
    auto load_rows = [&](const WyItem& it) {
      Rows r{};
      const int hk = static_cast<int>(it.h / (HV / HK));
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int i = lane + 32 * rr;
        if (i < it.cr.len) {
          const int64_t t = it.cr.t0 + i, o = t * HV + it.h;
          r.G[rr] = Gc[o];
          r.beta[rr] = gdn_beta_at(gates, o);
          r.dg[rr] = gr.dg[o];
          r.rho[rr] = rho_k[t * HK + hk];
          if (gates.a.p) r.gda[rr] = gate_da(1.f, gates.a, gates.A_log, gates.dt_bias, o, it.h);
        }
      }
      return r;
    };
    WyItem it = wy_item(item_at(0), chunks, by_hv);
    Rows rows = load_rows(it);
    for (int n = 0; item_at(n) >= 0; ++n) {
      const int p = n & 1, nidx = item_at(n + 1);
      const bool more = nidx >= 0;
      const WyItem nx = more ? wy_item(nidx, chunks, by_hv) : it;
      if (n >= 2) tma::mbar_wait(empty + 8 * p, ((n >> 1) - 1) & 1);
      if (lane == 0) {
        const uint32_t s = sb + p * Smem::set, bar = full + 8 * p;
        const int t0 = static_cast<int>(it.cr.t0), hk = static_cast<int>(it.h / (HV / HK));
        tma::mbar_expect_tx(bar, kSetBytes);
        tma::image_tile(s + Smem::dW, maps.dW, t0, it.h, bar);
        tma::image_tile(s + Smem::dU, maps.dU, t0, it.h, bar);
        tma::image_tile(s + Smem::V, maps.V, t0, it.h, bar);
        tma::image_tile(s + Smem::K, maps.k, t0, hk, bar);
        tma::image_tile(s + Smem::dF, maps.dF, t0, it.h, bar);
        tma::image_tile(s + Smem::T, maps.T, (it.ch * static_cast<int>(HV) + it.h) * C, 0, bar);
        int* rec = reinterpret_cast<int*>(gdn_smem + Smem::rec);
        rec[2 * p] = t0, rec[2 * p + 1] = it.cr.len, rec[4 + p] = it.h;
      }
      float* v = reinterpret_cast<float*>(gdn_smem + Smem::vec) + p * kVecs * C;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int i = lane + 32 * rr;
        v[i] = rows.G[rr], v[C + i] = rows.beta[rr], v[2 * C + i] = expf(rows.G[rr]),
        v[3 * C + i] = rows.dg[rr];
        v[4 * C + i] = rows.rho[rr], v[5 * C + i] = rows.gda[rr];
      }
      tma::mbar_arrive(full + 8 * p);
      if (more) rows = load_rows(nx);  // in flight until the next fill
      it = nx;
    }
    return;
  }

  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform: descriptors in uniform registers
  const int g = lane >> 2, t4 = lane & 3, c32 = 32 * wg, c64 = 64 * wg;
  const bool dv16 = dv_out.t == KType::BF16 && (reinterpret_cast<uintptr_t>(dv_out.p) & 15) == 0;
  // The consumer warpgroups' barrier (named barrier 1: the producer warp never joins).
  auto consumers_sync = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory"); };
  // the thread's accumulator pairs in 64-row tiles: + pair_at(pb32 / pb64, nb, hf) = + sw<C>(16wq + g + 8hf,
  // c32 / c64 + 8nb + 2t4)
  const uint32_t pb32 = gdn_words::pair_base(16 * wq + g, t4, c32), pb64 = gdn_words::pair_base(16 * wq + g, t4, c64);
  const uint64_t P_k = desc_k(sb + Smem::P), Y_mn = desc_mn(sb + Smem::Y + 4096 * wg, 2048);
  const uint64_t P1_k = desc_k(sb + Smem::P1), P2_mn = desc_mn(sb + Smem::P2, 2048);
  int n = 0;
  for (int idx = item_at(0); idx >= 0; idx = item_at(++n)) {
    const int p = n & 1, h = idx - by_hv.div(idx) * static_cast<int>(HV), head = n - by_r.div(n) * r;  // head: within the group
    const uint32_t S = sb + p * Smem::set;
    const unsigned char* Tp = gdn_smem + p * Smem::set + Smem::T;
    const unsigned char* dFp = gdn_smem + p * Smem::set + Smem::dF;
    const float* vec = reinterpret_cast<const float*>(gdn_smem + Smem::vec) + p * kVecs * C;
    const float *G = vec, *B = vec + C, *Gam = vec + 2 * C, *Rho = vec + 4 * C;
    float* sums = reinterpret_cast<float*>(gdn_smem + Smem::sums) + p * kSums * C;
    float* xws = sums;           // [4][64]
    float* xus = sums + 4 * C;   // [4][64]
    float* ras = sums + 8 * C;   // [2][64]
    float* cas = sums + 10 * C;  // [4][64]
    tma::mbar_wait(full + 8 * p, (n >> 1) & 1);
    const int* rec = reinterpret_cast<const int*>(gdn_smem + Smem::rec) + 2 * p;
    const int64_t t0 = rec[0];
    const int len = rec[1];

    const uint64_t dW_k = desc_k(S + Smem::dW), dU_k = desc_k(S + Smem::dU), K_k = desc_k(S + Smem::K);
    const uint64_t Kn_k = desc_k(S + Smem::K + 1024 * wg), Vn_k = desc_k(S + Smem::V + 1024 * wg);
    const uint64_t Tn_k = desc_k(S + Smem::T + 1024 * wg), T_mn = desc_mn(S + Smem::T, 2048);
    const uint64_t dW_mn = desc_mn(S + Smem::dW + 8192 * wg, 2048),
                   dU_mn = desc_mn(S + Smem::dU + 8192 * wg, 2048),
                   K_mn = desc_mn(S + Smem::K + 8192 * wg, 2048);
    const int64_t row0 = t0 * HV + h;  // (t0, h) of the (T, HV, 128) tensors
    // Products in issue order (wgmma groups complete in order): [1] a, b; k·kᵀ; Xu | Y | Tᵀ·Y; Xw | Z. Those
    // that depend on nothing but the tiles (k·kᵀ, Xu, Xw) run while the epilogues before them do.
    float a[16], b[16], kk[16], xu[32];
    wgmma::fence_operands(a);
    wgmma::fence_operands(b);
    wgmma::fence_operands(kk);
    wgmma::fence_operands(xu);
    wgmma::fence();
    // [1] a = dW·kᵀ, b = dU·Vᵀ on columns c32 .. c32 + 31 (k, V rows as the K-major B)
    mma_steps<D / 16, 0, 0>(a, dW_k, 2048, Kn_k, 2048);
    mma_steps<D / 16, 0, 0>(b, dU_k, 2048, Vn_k, 2048);
    wgmma::commit();
    mma_steps<D / 16, 0, 0>(kk, K_k, 2048, Kn_k, 2048);
    // Xu = Tᵀ·dU on columns c64 .. c64 + 63 (T, dU MN-major)
    mma_steps<C / 16, 1, 1>(xu, T_mn, 512, dU_mn, 512);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operands(a);
    wgmma::fence_operands(b);
    float xw8[8] = {}, xv8[8] = {};  // this warp's column shares of Xw·K̂, Xu·V (stored after [2]'s issue)
    {
      float2 Rj[4], Bj[4], Gj[4];  // ρ, β, γ of the thread's columns j = c32 + 8nb + 2t4 (+1)
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const int j = c32 + 8 * nb + 2 * t4;
        Rj[nb] = *reinterpret_cast<const float2*>(Rho + j);
        Bj[nb] = *reinterpret_cast<const float2*>(B + j);
        Gj[nb] = *reinterpret_cast<const float2*>(Gam + j);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + g + 8 * hf;
        const bool ok = i < len;
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
          const float2 t = ld_bf16x2(Tp + pair_at(pb32, nb, hf));
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int r = 4 * nb + 2 * hf + e;
            const float te = e ? t.y : t.x, at = (e ? Rj[nb].y : Rj[nb].x) * a[r];
            xw8[2 * nb + e] += te * at;
            xv8[2 * nb + e] += te * b[r];
            a[r] = ok ? (e ? Bj[nb].y : Bj[nb].x) * ((e ? Gj[nb].y : Gj[nb].x) * at + b[r]) : 0.f;
          }
        }
      }
      store_tile32(sb + Smem::P, a, c32);
    }
    wgmma::fence_proxy_async();
    consumers_sync();  // dT complete
    float y[16];
    wgmma::fence_operands(y);
    wgmma::fence();
    // [2] Y = dT·Tᵀ (T rows as the K-major B)
    mma_steps<C / 16, 0, 0>(y, P_k, 2048, Tn_k, 2048);
    wgmma::commit();
    store_column_sums(xws + wq * C + c32, xw8);  // read by row_terms, two barriers on
    store_column_sums(xus + wq * C + c32, xv8);
    if (warp == 0 && n > 0) row_suffix(p ^ 1);  // the item before: its row terms are complete
    wgmma::wait<0>();
    wgmma::fence_operands(kk);
    wgmma::fence_operands(xu);
    wgmma::fence_operands(y);
    store_tile32(sb + Smem::Y, y, c32);
    wgmma::fence_proxy_async();
    consumers_sync();  // Y complete
    float da[16], xw[32];
    wgmma::fence_operands(da);
    wgmma::fence_operands(xw);
    wgmma::fence();
    // [3] Tᵀ·Y (T and Y MN-major); then Xw = Tᵀ·dW on columns c64 .. (dW MN-major)
    mma_steps<C / 16, 1, 1>(da, T_mn, 512, Y_mn, 512);
    wgmma::commit();
    mma_steps<C / 16, 1, 1>(xw, T_mn, 512, dW_mn, 512);
    wgmma::commit();
    // dv (=) diag(β)·Xu, stored while [3] runs
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float bi = B[16 * wq + g + 8 * hf];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) xu[4 * nb + 2 * hf] *= bi, xu[4 * nb + 2 * hf + 1] *= bi;
    }
    if (dv16) {
      gdn_mma::store_tile_bf16(static_cast<bf16*>(dv_out.p) + row0 * D, HV * D, as_frags(xu), 16 * wq, c64,
                               len, 1.f);
    } else {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + g + 8 * hf;
        if (i >= len) continue;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb)
          st_pair(dv_out, (row0 + int64_t(i) * HV) * D + c64 + 8 * nb + 2 * t4, xu[4 * nb + 2 * hf],
                  xu[4 * nb + 2 * hf + 1]);
      }
    }
    wgmma::wait<1>();
    wgmma::fence_operands(da);
    {
      float rs[2] = {0.f, 0.f}, cs[8] = {};
      float2 Gj[4], Rj[4];  // G and ρ of the thread's columns j = c32 + 8nb + 2t4 (+1)
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const int j = c32 + 8 * nb + 2 * t4;
        Gj[nb] = *reinterpret_cast<const float2*>(G + j);
        Rj[nb] = *reinterpret_cast<const float2*>(Rho + j);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + g + 8 * hf;
        const float Gi = G[i] * kLog2e, bi = B[i], ri = Rho[i];
#pragma unroll
        for (int nb = 0; nb < 4; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = c32 + 8 * nb + 2 * t4 + e, r = 4 * nb + 2 * hf + e;
            const float gj = e ? Gj[nb].y : Gj[nb].x, rj = e ? Rj[nb].y : Rj[nb].x;
            const float x = (i > j && i < len) ? -da[r] * exp2_approx(Gi - gj * kLog2e) : 0.f;
            const float xk = x * kk[r] * ri * rj;
            rs[hf] += xk;
            cs[2 * nb + e] += bi * xk;
            da[r] = bi * x * rj;
            kk[r] = ri * bi * x;
          }
        const float rsum = gdn_chunk::quad_sum(rs[hf]);
        if (t4 == 0) ras[wg * C + i] = rsum;
      }
      store_column_sums(cas + wq * C + c32, cs);
      store_tile32(sb + Smem::P1, da, c32);
      store_tile32(sb + Smem::P2, kk, c32);
    }
    wgmma::fence_proxy_async();
    wgmma::wait<0>();
    wgmma::fence_operands(xw);
    // dk̂ accumulator: the partial sums + diag(βγ)·Xw, then += P1·k + P2ᵀ·k
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = 16 * wq + g + 8 * hf;
      const float bg = B[i] * Gam[i];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const int r = 4 * nb + 2 * hf;
        const float2 f = ld_bf16x2(dFp + pair_at(pb64, nb, hf));
        xw[r] = f.x + bg * xw[r];
        xw[r + 1] = f.y + bg * xw[r + 1];
      }
    }
    consumers_sync();  // P1, P2 complete (and every partial sum)
    wgmma::fence_operands(xw);
    wgmma::fence();
    // [4] Z = P1·k + P2ᵀ·k on columns c64 .. (k MN-major)
    mma_steps<C / 16, 0, 1>(xw, P1_k, 2048, K_mn, 512, true);
    mma_steps<C / 16, 1, 1>(xw, P2_mn, 512, K_mn, 512, true);
    wgmma::commit();
    if (lane < 8) row_terms(p, t0, len, h);  // the sums are complete since the P1/P2 barrier
    wgmma::wait<0>();
    wgmma::fence_operands(xw);
    if (!dk_out.p) {
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty + 8 * p);  // this warp is done with set p
      gdn_mma::store_tile_bf16(dkh + row0 * D, HV * D, as_frags(xw), 16 * wq, c64, len, 1.f);
    } else if (head + 1 < r) {
      // dk̂ of this value head into the next one's partial sums (the group's next item: same chunk, rows and
      // thread layout), as bf16 like the per-head dk̂ the separate L2 backward would read
      tma::mbar_wait(full + 8 * (p ^ 1), ((n + 1) >> 1) & 1);
      unsigned char* dFn = gdn_smem + (p ^ 1) * Smem::set + Smem::dF;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          const int q = 4 * nb + 2 * hf;
          auto* at = reinterpret_cast<__nv_bfloat162*>(dFn + pair_at(pb64, nb, hf));
          const float2 f = gdn_words::bf16x2_f2(*reinterpret_cast<const uint32_t*>(at));
          *at = __floats2bfloat162_rn(f.x + xw[q], f.y + xw[q + 1]);
        }
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty + 8 * p);
    } else {
      // the group's last head: dk = ρ·(dk̂ − k·ρ·(Σ dk̂ ⊙ k)·ρ), dk̂ summed over the group's heads (the L2
      // norm's backward, l2norm.cu), the row dots over both warpgroups' columns
      const unsigned char* Kp = gdn_smem + p * Smem::set + Smem::K;
      float* kdot = reinterpret_cast<float*>(gdn_smem + Smem::kdot);  // [2][64] by warpgroup
      float2 kv[2][8];                                                // k at the thread's elements
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + g + 8 * hf;
        float dot = 0.f;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          kv[hf][nb] = ld_bf16x2(Kp + pair_at(pb64, nb, hf));
          dot += xw[4 * nb + 2 * hf] * kv[hf][nb].x + xw[4 * nb + 2 * hf + 1] * kv[hf][nb].y;
        }
        dot = gdn_chunk::quad_sum(dot);
        if (t4 == 0) kdot[wg * C + i] = dot;
      }
      const float rh[2] = {Rho[16 * wq + g], Rho[16 * wq + g + 8]};
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty + 8 * p);  // k and ρ are in registers
      // the row dots: warps wq and wq + 4 hold the same rows (named barrier 2 + wq, the two warps only)
      asm volatile("bar.sync %0, 64;\n" ::"r"(2 + wq) : "memory");
      const int64_t hk = h / r;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + g + 8 * hf;
        if (i >= len) continue;
        const float rho = rh[hf], dot = (kdot[i] + kdot[C + i]) * rho;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          const int q = 4 * nb + 2 * hf;
          st_pair<true>(dk_out, ((t0 + i) * HK + hk) * D + c64 + 8 * nb + 2 * t4,
                        rho * (xw[q] - kv[hf][nb].x * rho * dot),
                        rho * (xw[q + 1] - kv[hf][nb].y * rho * dot));
        }
      }
    }
  }
  consumers_sync();  // the last item's row terms
  if (warp == 0 && n > 0) row_suffix((n - 1) & 1);
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
bool gdn_wy_wgmma_selected(const KernelPolicy& pol, const GdnQK& qk, KIn v, int dk, int dv) {
  return pol.hopper() && gdn_qk_kind(qk) == 1 && v.t == KType::BF16 &&
         (reinterpret_cast<uintptr_t>(v.p) & 15) == 0 && dk == D && dv == D;
}

cudaError_t launch_gdn_wy_grad_wgmma(const KernelPolicy& pol, const GdnQK& qk, KIn v, const GdnGates& gates,
                                     const float* Gc, const int32_t* chunks, int nchunks, const void* T16,
                                     const void* dW16, const void* dvn16, const void* dk_part16, void* dkh16,
                                     KOut dv_out, const GdnGateGrads& gr, int64_t HK, int64_t HV,
                                     cudaStream_t s, int64_t T, KOut dk) {
  if (!gdn_wy_wgmma_selected(pol, qk, v, D, D)) return cudaErrorInvalidValue;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  if (T <= 0 || reinterpret_cast<uintptr_t>(dk.p) % 4 != 0) return cudaErrorNotSupported;  // dk: pair stores
  WyMaps maps{};
  using tma::encode_image_map;
  const int64_t mats = int64_t(nchunks) * HV * C;  // rows of the (nchunks, HV, 64, 64) T
  if (!encode_image_map(maps.dW, dW16, T, HV, C, true) || !encode_image_map(maps.dU, dvn16, T, HV, C, true) ||
      !encode_image_map(maps.V, v.p, T, HV, C, true) || !encode_image_map(maps.k, qk.k.p, T, HK, C, true) ||
      !encode_image_map(maps.dF, dk_part16, T, HV, C, true) ||
      !encode_image_map(maps.T, T16, mats, 1, C, true, C, C))
    return cudaErrorNotSupported;
  cudaError_t e = set_launch_smem(pol, gdn_wy_grad_wgmma_kernel, Smem::bytes);
  if (e != cudaSuccess) return e;
  const int sms = pol.sm_count;
  const int items = nchunks * static_cast<int>(HV), groups = dk.p ? items / static_cast<int>(HV / HK) : items;
  gdn_wy_grad_wgmma_kernel<<<std::min(groups, sms), NT + 32, Smem::bytes, s>>>(
      maps, qk.rk, gates, Gc, chunks, items, static_cast<bf16*>(dkh16), dv_out, gr, HK, HV, dk,
      DivBy(dk.p ? static_cast<int>(HV / HK) : 1), DivBy(static_cast<int>(HV)));
  return cudaGetLastError();
}
#endif

}  // namespace deltatune::kernels
