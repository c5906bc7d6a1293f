// The chunked GDN backward's state/intra kernel (the contract of gdn_chunk_grad_mma_kernel<128, 128, true>,
// chunk_bwd_mma.cu: bf16 q, k with ρ, bf16 dO) on Hopper's warpgroup tensor cores (wgmma) with its tiles
// brought by TMA (sm_90a). Per work item (chunk, value head), with the same formulas:
//   [1] dW = −dV'·S_nᵀ (A negated by the wgmma), dQ̂_s = dO·S_nᵀ  (8 + 8 wgmma m64n64 per warpgroup)
//   [2] D = dO·V'ᵀ (32 columns per warpgroup), dK̂_s = V'·dS^endᵀ   (8 m64n32 + 8 m64n64)
//       Σ(S_n ⊙ dS^end) by FMA on the tiles while [1] and [2] run
//   [3] D' = diag(scale·ρ_q)·tril(D ⊙ e^{G_i−G_j})·diag(ρ_k) into a bf16 tile; dQ̂ and dK̂ carried as
//       diag(scale·ρ_q·e^G)·dQ̂_s and diag(ρ_k·e^{G_last−G})·dK̂_s, then += D'·k, += D'ᵀ·q (4 + 4 m64n64)
//   row dots with q and k for dg, the stores, and with dq fused the L2 norm's backward of q (see the mma.sync
//   kernel's comments: the same sums in the same places).
// Warpgroup wg owns columns 64wg .. 64wg + 63 of every 64 x 128 product (all 64 rows). Every operand is a
// 32-byte-swizzled tile (sw below): 16-column blocks of R rows x 32 bytes, so one tile serves as a K-major
// operand (rows m or n) and as an MN-major one (rows k); one TMA copy writes a whole tile (common/tma.cuh;
// 32-byte rows: whole sectors, half the requests of 16-byte blocks).
//
// Pipeline (a persistent grid of one 256-thread block per SM; thread 0 issues the copies):
//   S_n, dV', dO   two buffers by item parity: the next item's are issued when an item starts (barA[parity])
//   dS^end, V'     one buffer: the next item's are issued once this item's [2] is done (barB)
//   q, k           one buffer: a group's (the value heads of a key head) issued when its first item starts
//                  (barKQ), needed from the D' step on
//   G, ρ           by cp.async (4-byte columns), with the tiles of the same step
// so that the memory system always has the next tiles in flight. Rows past a chunk's end are the next
// sequence's (or zeros past the tensor's end): every product masks them (D' is zero there, ek and ρ_q are
// zero, the stores and row dots stop at the chunk's end).
//
// Measured (H200, 8K tokens = 2 x 4096, HK 16, HV 32, ncu): see docs/perf/PERF_NOTES.md, session 17.
#include <cstdlib>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/bf16_words.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/div_by.cuh"
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
using gdn_wgmma::sw;
using gdn_words::bf16x2_f2;
using gdn_words::ld_bf16x2;
using gdn_words::pair_at;
constexpr int C = kGdnChunk, D = 128, NT = 256;
constexpr uint32_t kState = D * D * 2, kRows = C * D * 2;  // bytes of a state tile and of a 64-row tile

struct Smem {                                      // byte offsets
  static constexpr uint32_t S = 0;                 // [2] S_n [dk][dv], image R = 128
  static constexpr uint32_t dU = S + 2 * kState;   // [2] dV' [64][dv], R = 64
  static constexpr uint32_t dO = dU + 2 * kRows;   // [2] dO [64][dv]
  static constexpr uint32_t dS = dO + 2 * kRows;   // dS^end [dk][dv]
  static constexpr uint32_t Vp = dS + kState;      // V' [64][dv]
  static constexpr uint32_t Dp = Vp + kRows;       // D' [64][64]
  static constexpr uint32_t K = Dp + C * C * 2;    // k [64][dk]
  static constexpr uint32_t Q = K + kRows;         // q [64][dk]
  static constexpr uint32_t rho = Q + kRows;       // ρ_k, ρ_q [64] each
  static constexpr uint32_t G = rho + 2 * C * 4;   // [2][64] G by item parity
  static constexpr uint32_t rq = G + 2 * C * 4;    // [2][64] row sums of dQ̂ ⊙ Q̂ per warpgroup
  static constexpr uint32_t rk = rq + 2 * C * 4;   // [2][64] row sums of dK̂ ⊙ K̂
  static constexpr uint32_t red = rk + 2 * C * 4;  // [8] per-warp shares of gsum
  static constexpr uint32_t sqg = red + 8 * 4;     // [64] fused dq: Σ over the group's heads of q·A
  static constexpr uint32_t bar = sqg + C * 4;     // mbarriers: barA[2], barB, barKQ
  static constexpr uint32_t bytes = bar + 4 * 8;   // 223,776
};
static_assert(Smem::K % 128 == 0 && Smem::bar % 8 == 0, "tile and mbarrier alignment");
constexpr uint32_t kABytes = kState + 2 * kRows, kBBytes = kState + kRows, kKQBytes = 2 * kRows;

// The tensor maps of the tiles (common/tma.cuh).
struct GradMaps {
  tma::ImageMap dO, Vp, dU, q, k, dS, S, So;
};

// One work item (chunk, value head), value heads fastest (the value heads of a key head share its q, k): the
// fields of gdn_chunk::GradItem with its chunk and key head, the divisions by the head counts by DivBy.
struct GradItem {
  int ch, h, hk;
  ChunkRef cr;
  int64_t hs, rv, rkq;  // (chunk, head) row of states/dh/gsum; first elements of the chunk's rows
};
__device__ __forceinline__ GradItem grad_item(int item, const int32_t* chunks, const DivBy& by_hv,
                                              const DivBy& by_r, int64_t HK, int64_t HV) {
  GradItem it;
  it.ch = by_hv.div(item);
  it.h = item - it.ch * static_cast<int>(HV);
  it.hk = by_r.div(it.h);
  it.cr = gdn_chunk::chunk_at(chunks, it.ch);
  it.hs = static_cast<int64_t>(it.ch) * HV + it.h;
  it.rv = (it.cr.t0 * HV + it.h) * D, it.rkq = (it.cr.t0 * HK + it.hk) * D;
  return it;
}

// 2^x (ex2.approx.ftz: relative error ~2^-22, zero below 2^-126). The exponentials here scale values that are
// rounded to bf16 (D') or multiply fp32 accumulators whose results leave as bf16 or enter dg's sums.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_grad_wgmma_kernel(const __grid_constant__ GradMaps maps, const float* rho_q_in,
                                const float* rho_k_in, float scale, const float* Gc, const int32_t* chunks,
                                int nitems, bool half_states, bf16* dqh, bf16* dkh, bf16* dW, float* gsum,
                                float* dg, int64_t HK, int64_t HV, KOut dq, DivBy by_hv, DivBy by_r) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char gdn_smem[];
  const uint32_t sb = mma::smem_addr(gdn_smem);
  const uint32_t barA = sb + Smem::bar, barB = barA + 16, barKQ = barA + 24;  // barA[p] at barA + 8p
  const int tid = threadIdx.x, warp = tid >> 5, wq = warp & 3, lane = tid & 31;
  const int wg =
      __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform: descriptors stay in uniform registers
  const int g = lane >> 2, t4 = lane & 3, m0 = 16 * wq, n0 = 64 * wg;
  const int64_t ks = HK * D;  // row stride of (T, HK, dk) tensors
  float* Gb = reinterpret_cast<float*>(gdn_smem + Smem::G);
  float* rqs = reinterpret_cast<float*>(gdn_smem + Smem::rq);
  float* rks = reinterpret_cast<float*>(gdn_smem + Smem::rk);
  float* red = reinterpret_cast<float*>(gdn_smem + Smem::red);
  float* sqg = reinterpret_cast<float*>(gdn_smem + Smem::sqg);
  const float* rhk = reinterpret_cast<const float*>(gdn_smem + Smem::rho);
  const float* rhq = rhk + C;
  const unsigned char* kp = gdn_smem + Smem::K;
  const unsigned char* qp = gdn_smem + Smem::Q;
  // the thread's accumulator pairs in the q, k tiles: kp + pair_at(pb, nb, hf) = kp + sw<C>(m0 + g + 8hf, n0 +
  // 8nb + 2t4)
  const uint32_t pb = gdn_words::pair_base(m0 + g, t4, n0);
  // operand descriptors; a k step of 16 columns is the next block (64 rows: 2048 bytes, 128 rows: 4096) for
  // K-major operands and the next two 8-row groups (512 bytes) for MN-major ones
  const uint64_t Vp_k = desc_k(sb + Smem::Vp), dS_k = desc_k(sb + Smem::dS + 2048 * wg);
  const uint64_t Dp_k = desc_k(sb + Smem::Dp), Dp_mn = desc_mn(sb + Smem::Dp, 2048);
  const uint64_t K_mn = desc_mn(sb + Smem::K + 8192 * wg, 2048),
                 Q_mn = desc_mn(sb + Smem::Q + 8192 * wg, 2048);

  // thread 0: S_n, dV', dO of item `it` into buffer p (barA[p]); G by cp.async (every thread: tid < 64)
  auto load_a_tiles = [&](const GradItem& it, int p) {  // thread 0
    // states[chunk], or with half states the even chunks' at S[chunk / 2] and the odd ones' at So[chunk / 2]
    const int64_t slot = half_states ? (it.ch >> 1) * HV + it.h : it.hs;
    const uint32_t bar = barA + 8 * p;
    tma::mbar_arrive_expect_tx(bar, kABytes);
    tma::image_tile(sb + Smem::S + p * kState, half_states && (it.ch & 1) ? maps.So : maps.S,
                    static_cast<int>(slot * D), 0, bar);
    tma::image_tile(sb + Smem::dU + p * kRows, maps.dU, static_cast<int>(it.cr.t0), it.h, bar);
    tma::image_tile(sb + Smem::dO + p * kRows, maps.dO, static_cast<int>(it.cr.t0), it.h, bar);
  };
  auto load_a_rows = [&](const GradItem& it, int p) {  // tid < 64
    const bool ok = tid < it.cr.len;
    mma::cp_async4(mma::smem_addr(Gb + p * C + tid), ok ? Gc + (it.cr.t0 + tid) * HV + it.h : Gc, ok);
  };
  auto load_b = [&](const GradItem& it) {  // thread 0: dS^end, V'
    tma::mbar_arrive_expect_tx(barB, kBBytes);
    tma::image_tile(sb + Smem::dS, maps.dS, static_cast<int>(it.hs * D), 0, barB);
    tma::image_tile(sb + Smem::Vp, maps.Vp, static_cast<int>(it.cr.t0), it.h, barB);
  };
  auto load_kq_tiles = [&](const GradItem& it) {  // thread 0: k, q
    tma::mbar_arrive_expect_tx(barKQ, kKQBytes);
    tma::image_tile(sb + Smem::K, maps.k, static_cast<int>(it.cr.t0), it.hk, barKQ);
    tma::image_tile(sb + Smem::Q, maps.q, static_cast<int>(it.cr.t0), it.hk, barKQ);
  };
  auto load_kq_rows = [&](const GradItem& it) {  // tid < 128: ρ of the rows by cp.async
    // (t0 + i)·HK + hk = rkq / D + i·HK (zeros past the chunk's end)
    const int i = tid % C;
    const bool ok = i < it.cr.len;
    const float* src = (tid < C ? rho_k_in : rho_q_in) + it.rkq / D + (ok ? i * HK : 0);
    mma::cp_async4(sb + Smem::rho + 4 * tid, src, ok);
  };

  // With dq: the r = HV/HK value heads of a key head back to back in one block (a group), their carried
  // diag(scale·ρ_q)·dQ̂ summed in registers (stash), the last one storing dq = A − ρ_q²·q·(q·A).
  const bool fuse = dq.p != nullptr;
  const int r = fuse ? static_cast<int>(HV / HK) : 1, ngroups = nitems / r;
  // The block's items in order: (group, head j) -> the next one; chunk records are read one item ahead of
  // use.
  auto after = [&](int grp, int j, int& ngrp, int& nj) {
    const bool last = j + 1 == r;
    ngrp = last ? grp + static_cast<int>(gridDim.x) : grp, nj = last ? 0 : j + 1;
  };
  GradItem it = grad_item(blockIdx.x * r, chunks, by_hv, by_r, HK, HV);
  int ngrp, nj;
  after(blockIdx.x, 0, ngrp, nj);
  GradItem next = ngrp < ngroups ? grad_item(ngrp * r + nj, chunks, by_hv, by_r, HK, HV) : it;
  if (tid == 0) {
    for (int b = 0; b < 4; ++b) tma::mbar_init(barA + 8 * b, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) load_a_tiles(it, 0), load_b(it);
  if (tid < C) load_a_rows(it, 0);
  float stash[32];
#pragma unroll
  for (int x = 0; x < 32; ++x) stash[x] = 0.f;
  for (int grp = blockIdx.x, j = 0, n = 0, ng = 0; grp < ngroups; ++n) {
    const ChunkRef cr = it.cr;
    const int par = n & 1;
    const bool last = j + 1 == r;  // the group's last value head
    const bool more = ngrp < ngroups;
    int n2grp, n2j;  // the item after next (its record is loaded now, used by the next iteration)
    after(ngrp, nj, n2grp, n2j);
    const GradItem next2 = n2grp < ngroups ? grad_item(n2grp * r + n2j, chunks, by_hv, by_r, HK, HV) : next;
    const float* G = Gb + par * C;
    const uint32_t Sb = sb + Smem::S + par * kState, dUb = sb + Smem::dU + par * kRows,
                   dOb = sb + Smem::dO + par * kRows;
    tma::mbar_wait(barA + 8 * par, (n >> 1) & 1);
    __syncthreads();  // the last item's shared reads are done

    const uint64_t dU_k = desc_k(dUb), dO_k = desc_k(dOb), S_k = desc_k(Sb + 2048 * wg);
    float aw[32], aq[32], ak[32], d[16];
    wgmma::fence_operands(aw);
    wgmma::fence_operands(aq);
    wgmma::fence();
    // [1] S_n as the K-major B (rows n = dk)
#pragma unroll
    for (int s = 0; s < D / 16; ++s)
      wgmma::mma_m64n64<0, 0, -1>(aw, desc_at(dU_k, 2048 * s), desc_at(S_k, 4096 * s), s > 0);
#pragma unroll
    for (int s = 0; s < D / 16; ++s)
      wgmma::mma_m64n64<0, 0>(aq, desc_at(dO_k, 2048 * s), desc_at(S_k, 4096 * s), s > 0);
    wgmma::commit();
    // the copies behind [1]'s issue (not before it: warpgroup 0's first wgmma waits for all of its warps): the
    // group's q, k and the next item's S_n, dV', dO into the buffers the last item used
    if (tid == 0) {
      wgmma::fence_proxy_async();  // before copies overwrite tiles read generically
      if (j == 0) load_kq_tiles(it);
      if (more) load_a_tiles(next, par ^ 1);
    }
    if (j == 0 && tid < 2 * C) load_kq_rows(it);
    if (more && tid < C) load_a_rows(next, par ^ 1);
    mma::cp_async_commit();
    tma::mbar_wait(barB, n & 1);
    wgmma::fence_operands(ak);
    wgmma::fence_operands(d);
    wgmma::fence();
    // [2] D on columns 32wg .. (V' rows as the K-major B), dK̂_s
#pragma unroll
    for (int s = 0; s < D / 16; ++s)
      wgmma::mma_m64n32<0, 0>(d, desc_at(dO_k, 2048 * s), desc_at(Vp_k, 1024 * wg + 2048 * s), s > 0);
#pragma unroll
    for (int s = 0; s < D / 16; ++s)
      wgmma::mma_m64n64<0, 0>(ak, desc_at(Vp_k, 2048 * s), desc_at(dS_k, 4096 * s), s > 0);
    wgmma::commit();
    float trace = 0.f;  // this thread's share of Σ(S_n ⊙ dS^end): both tiles have the same layout
#pragma unroll
    for (int e = 0; e < D * D / 8 / NT; ++e) {
      const int p = tid + NT * e;
      const uint4 a = reinterpret_cast<const uint4*>(gdn_smem + Smem::S + par * kState)[p];
      const uint4 b = reinterpret_cast<const uint4*>(gdn_smem + Smem::dS)[p];
      const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 x = bf16x2_f2(av[w]), y = bf16x2_f2(bv[w]);
        trace += x.x * y.x + x.y * y.y;
      }
    }
    wgmma::wait<1>();
    wgmma::fence_operands(aw);
    wgmma::fence_operands(aq);
    gdn_mma::store_tile_bf16(dW + it.rv, HV * D, as_frags(aw), m0, n0, cr.len, 1.f);
    wgmma::wait<0>();
    wgmma::fence_operands(d);
    wgmma::fence_operands(ak);
    mma::cp_async_wait<0>();  // this item's ρ, the next one's G
    __syncthreads();  // both warpgroups' [1], [2] and the trace are done with S_n, dV', dO, dS^end, V'
    if (more && tid == 0) {
      wgmma::fence_proxy_async();  // the trace's generic reads before the copies' writes
      load_b(next);
    }

    const float Gl = G[cr.len - 1];
    {  // D' into its tile (zeros above the diagonal and past the chunk's end)
      float2 Gj[4], Rj[4];  // G and ρ_k of the thread's columns jc = 32wg + 8nb + 2t4 (+1)
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const int jc = 32 * wg + 8 * nb + 2 * t4;
        Gj[nb] = *reinterpret_cast<const float2*>(G + jc);
        Rj[nb] = *reinterpret_cast<const float2*>(rhk + jc);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + g + 8 * hf;
        const float qi = scale * rhq[i], Gi = G[i];  // e^{G_i − G_j} = 2^{(G_i − G_j)·log2 e}
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int jc = 32 * wg + 8 * nb + 2 * t4 + e;
            const float gj = e ? Gj[nb].y : Gj[nb].x, rj = e ? Rj[nb].y : Rj[nb].x;
            float& x = d[4 * nb + 2 * hf + e];
            x = (i >= jc && i < cr.len) ? qi * x * rj * exp2_approx((Gi - gj) * kLog2e) : 0.f;
          }
        }
      }
    }
#pragma unroll
    for (int jj = 0; jj < 2;
         ++jj) {  // stmatrix x4: lane 8i + rr gives row rr of matrix i = (column block, half)
      const int i = lane >> 3, row = m0 + 8 * (i & 1) + (lane & 7), col = 32 * wg + 8 * (2 * jj + (i >> 1));
      using gdn_wgmma::pack;
      wgmma::stmatrix_x4(sb + Smem::Dp + sw<C>(row, col), pack(d[8 * jj], d[8 * jj + 1]),
                         pack(d[8 * jj + 2], d[8 * jj + 3]), pack(d[8 * jj + 4], d[8 * jj + 5]),
                         pack(d[8 * jj + 6], d[8 * jj + 7]));
    }
    tma::mbar_wait(barKQ, ng & 1);  // the group's q, k
    float kpart = 0.f;              // Σ(dK̂_s ⊙ K̂) over this thread's elements
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      const float eq = exp2_approx(G[i] * kLog2e) * scale * rhq[i];
      const float ek = i < cr.len ? exp2_approx((Gl - G[i]) * kLog2e) * rhk[i] : 0.f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const float2 kv = ld_bf16x2(kp + pair_at(pb, nb, hf));
        const int a = 4 * nb + 2 * hf;
        aq[a] *= eq, aq[a + 1] *= eq;
        ak[a] *= ek, ak[a + 1] *= ek;
        kpart += ak[a] * kv.x + ak[a + 1] * kv.y;
      }
    }
    wgmma::fence_proxy_async();
    __syncthreads();  // D' complete
    // [3] dQ̂ += D'·k (k MN-major), dK̂ += D'ᵀ·q (D' and q MN-major)
    wgmma::fence_operands(aq);
    wgmma::fence_operands(ak);
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
      wgmma::mma_m64n64<0, 1>(aq, desc_at(Dp_k, 2048 * s), desc_at(K_mn, 512 * s), true);
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
      wgmma::mma_m64n64<1, 1>(ak, desc_at(Dp_mn, 512 * s), desc_at(Q_mn, 512 * s), true);
    wgmma::commit();
    // the next item's dS^end, V' behind [3]'s issue (the tiles are free since the barrier after [2])
    wgmma::wait<0>();
    wgmma::fence_operands(aq);
    wgmma::fence_operands(ak);

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      float sq = 0.f, sk = 0.f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {  // rows past the chunk's end: zeros in aq, ak (eq·0, ek = 0, D' = 0)
        const int a = 4 * nb + 2 * hf;
        const uint32_t o = pair_at(pb, nb, hf);
        const float2 qv = ld_bf16x2(qp + o), kv = ld_bf16x2(kp + o);
        sq += aq[a] * qv.x + aq[a + 1] * qv.y;
        sk += ak[a] * kv.x + ak[a + 1] * kv.y;
      }
      // dk̂ = ak / ρ_k and (without fused dq) dq̂ = aq / (scale·ρ_q); rows < len have ρ > 0
      const float uq = i < cr.len ? 1.f / (scale * rhq[i]) : 0.f, uk = i < cr.len ? 1.f / rhk[i] : 0.f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const int a = 4 * nb + 2 * hf;
        ak[a] *= uk, ak[a + 1] *= uk;
        if (!fuse) aq[a] *= uq, aq[a + 1] *= uq;
      }
      sq = gdn_chunk::quad_sum(sq);
      sk = gdn_chunk::quad_sum(sk);
      if (t4 == 0) rqs[wg * C + i] = sq, rks[wg * C + i] = sk;
    }
    gdn_mma::store_tile_bf16(dkh + it.rv, HV * D, as_frags(ak), m0, n0, cr.len, 1.f);
    if (!fuse) gdn_mma::store_tile_bf16(dqh + it.rv, HV * D, as_frags(aq), m0, n0, cr.len, 1.f);
    if (fuse) {
#pragma unroll
      for (int x = 0; x < 32; ++x) {
        aq[x] += stash[x];  // zero at the group's first head
        stash[x] = last ? 0.f : aq[x];
      }
    }
    const float part = warp_sum(exp2_approx(Gl * kLog2e) * trace + kpart);
    if (lane == 0) red[warp] = part;
    __syncthreads();    // row sums, gsum shares
    float total = 0.f;  // gsum, summed in the same order by every thread
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) total += red[w];
    if (tid == 0) gsum[it.hs] = total;
    if (tid < cr.len) {
      const float sq = rqs[tid] + rqs[C + tid], sk = rks[tid] + rks[C + tid];
      dg[(cr.t0 + tid) * HV + it.h] = sq - sk + (tid == cr.len - 1 ? total : 0.f);
      if (fuse && !last) sqg[tid] = (j > 0 ? sqg[tid] : 0.f) + sq;
    }
    if (fuse && last) {  // the group's Σ q·A of a row formed by each thread itself (no barrier for sqg)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + g + 8 * hf;
        if (i >= cr.len) continue;
        const float rho = rhq[i], c = rho * rho * ((j > 0 ? sqg[i] : 0.f) + (rqs[i] + rqs[C + i]));
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          const int dc = n0 + 8 * nb + 2 * t4, a = 4 * nb + 2 * hf;
          const float2 qv = ld_bf16x2(qp + pair_at(pb, nb, hf));
          st_pair<true>(dq, it.rkq + i * ks + dc, aq[a] - c * qv.x, aq[a + 1] - c * qv.y);
        }
      }
    }
    if (last) ++ng;
    it = next, next = next2, grp = ngrp, j = nj, ngrp = n2grp, nj = n2j;
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
bool gdn_grad_wgmma_selected(const KernelPolicy& pol, const GdnQK& qk, KIn dout, int dk, int dv) {
  return pol.hopper() && gdn_qk_kind(qk) == 1 && dout.t == KType::BF16 && dk == D && dv == D;
}

// The tensor maps of the launch's tensors (T tokens), or false.
bool grad_maps(GradMaps& m, int64_t T, int nchunks, int64_t HK, int64_t HV, const void* dout,
               const void* vnew, const void* dvn, const void* q, const void* k, const void* dh,
               const void* states, const void* states_odd) {
  if (T <= 0) return false;
  const int64_t slots = int64_t(nchunks) * HV;  // (chunk, head) pairs
  const int64_t even = states_odd ? (int64_t(nchunks) + 1) / 2 * HV : slots, odd = int64_t(nchunks) / 2 * HV;
  const bool has_odd = states_odd && odd > 0;
  using tma::encode_image_map;
  return encode_image_map(m.dO, dout, T, HV, C, true) && encode_image_map(m.Vp, vnew, T, HV, C, true) &&
         encode_image_map(m.dU, dvn, T, HV, C, true) && encode_image_map(m.q, q, T, HK, C, true) &&
         encode_image_map(m.k, k, T, HK, C, true) && encode_image_map(m.dS, dh, slots * D, 1, D, true) &&
         encode_image_map(m.S, states, even * D, 1, D, true) &&
         encode_image_map(m.So, has_odd ? states_odd : states, (has_odd ? odd : even) * D, 1, D, true);
}

cudaError_t launch_gdn_chunk_grad_wgmma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const float* Gc,
                                        const int32_t* chunks, int nchunks, const void* states16,
                                        const void* dh16, const void* vnew16, const void* dvn16, void* dqh16,
                                        void* dk_part16, void* dW16, float* gsum, float* dg, int64_t HK,
                                        int64_t HV, cudaStream_t s, KOut dq, const void* states_odd16,
                                        int64_t T) {
  if (!gdn_grad_wgmma_selected(pol, qk, dout, D, D)) return cudaErrorInvalidValue;
  if (dq.p && !gdn_grad_fuses_dq(qk, dout, dq, HK, HV)) return cudaErrorInvalidValue;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  GradMaps maps{};
  if (!grad_maps(maps, T, nchunks, HK, HV, dout.p, vnew16, dvn16, qk.q.p, qk.k.p, dh16, states16,
                 states_odd16))
    return cudaErrorNotSupported;
  cudaError_t e = set_launch_smem(pol, gdn_chunk_grad_wgmma_kernel, Smem::bytes);
  if (e != cudaSuccess) return e;
  const int sms = pol.sm_count;
  const int items = nchunks * static_cast<int>(HV);
  const int groups = dq.p ? items / static_cast<int>(HV / HK) : items;
  gdn_chunk_grad_wgmma_kernel<<<std::min(groups, sms), NT, Smem::bytes, s>>>(
      maps, qk.rq, qk.rk, qk.scale, Gc, chunks, items, states_odd16 != nullptr, static_cast<bf16*>(dqh16),
      static_cast<bf16*>(dk_part16), static_cast<bf16*>(dW16), gsum, dg, HK, HV, dq, DivBy(static_cast<int>(HV)),
      DivBy(static_cast<int>(HV / HK)));
  return cudaGetLastError();
}
#endif

}  // namespace deltatune::kernels
