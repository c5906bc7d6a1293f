// Tensor-core version (bf16 mma.sync, fp32 accumulators) of kernels 2 and 3 of the chunk-parallel GDN
// backward (chunk_bwd.cu, same formulas; see the decomposition at its top), fused into one kernel:
//  state products: dW = −dV'·S_nᵀ, dQ̂_s = diag(γ)·dO·S_nᵀ, dK̂_s = diag(Γ/γ)·V'·dS^endᵀ, gsum = Γ·Σ(S_n ⊙
//  dS^end)
//    + Σ(dK̂_s ⊙ K̂) (the chunk's extra dG term, on its last row);
//  intra: D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}) → bf16 in shared memory, dQ̂ = dQ̂_s + D·K̂, dK̂ = dK̂_s + Dᵀ·Q̂
//    (triangular k ranges), dG = rowsum(dQ̂ ⊙ Q̂) − rowsum(dK̂ ⊙ K̂) (+ gsum on the last row).
// dQ̂ and dK̂ stay in registers from the state product to the store: written once (=), both in bf16 (only the
// L2 backward reads dQ̂; the WY kernel adds to dK̂, fp32 before session 9: 64 MB less written and read at 8K,
// dk nmse 1.2e-5 -> 1.4e-5 in backend_ops); the row dots use the fp32 values. Σ(S_n ⊙ dS^end) is the trace of
// the diagonal 16x16 blocks of S_n·dS^endᵀ (one per warp; exact bf16 products, fp32 sums).
//
// Layout: a work item is (chunk of 64 tokens, value head); a persistent grid of one 256-thread block per SM
// loops over the items, value heads fastest (the second value head of a key head finds K̂, Q̂ in L2). Warp
// (wr, wc) owns rows 16wr..+15 x key columns 64wc..+63 of each 64 x 128 product. An item's inputs are all in
// shared memory at once, copied by cp.async: region A (S_n, dV', bf16 dO, G) and the K̂, Q̂ tiles (fp32 q̂, k̂,
// or, for bf16 inputs, q and k before the norm with their rows' ρ: GdnQK, split exactly as fp32 ones) during
// the previous item, as soon as their readers there are done; region B (dS^end, V') when the item starts,
// landing behind dW and dQ̂_s. Once dK̂_s, D and the trace have read region B, it takes K̂ and Q̂ as bf16
// hi + lo tiles. fp32/fp16 dO goes through registers into hi + lo tiles.
//
// Why fused (not two kernels at two blocks per SM): per item the inputs are 176 KiB (bf16 dO, V', dV' 16
// each, S_n, dS^end 32 each, fp32 K̂, Q̂ 32 each) and the outputs 80 KiB (dQ̂, dK̂ 32 each, bf16 dW 16); two
// kernels move 448 KiB (the intra kernel re-stages dO, V', K̂, Q̂ and reads dQ̂, dK̂ back to add to them).
//
// Resources (ptxas, sm_90a): 255 registers (R16: 251 with the fused dq, 240 before), no spills; 215,840
// bytes of shared memory (R16: 220,960, the second q, k set): one block per SM. mma per item (dk = dv =
// 128): 2560 (state products 1536, D 256, intra 640 with the hi/lo splits, trace 128); 2816 with fp32 dO.
//
// Time (H100, measured against the two kernels it replaces, their fp32-scratch version): T = 8192 tokens as
// 2 x 4096, HK 16, HV 32 (4096 items): 0.418 ms (was 0.741 + 0.575); as 82 sequences of 100 tokens (5248
// items, partial chunks): 0.482 ms (was 1.460); fp32 dO: 0.507 ms (was 1.561). At 2 x 4096 the ~0.94 GB of
// inputs and outputs move at ~2.25 TB/s. One block per SM leaves 2 warps per scheduler: ncu shows ~0.26
// instructions issued per cycle and scheduler, stalls on shared-memory/mma dependencies and barriers. Earlier
// variants took 0.34-0.37 ms with their global loads dropped and ~0.39 ms with their mma dropped: compute and
// memory time overlap well, and both would have to shrink. 512 threads per block (16 warps, 128 registers)
// was slower (more ldmatrix traffic and instructions per mma).
//
// Precision (host emulator, dev/emu/gdn/gdn_emu.cpp, nmse vs the fp32 FMA kernels): every output ≤ 2e-5. dg
// is a cancelling sum: the intra D-terms enter row i of dQ̂⊙Q̂ and row j of dK̂⊙K̂ with opposite signs and cancel
// in the chunk's reverse cumsum, so bf16 rounding of K̂ in D·K̂ and of Q̂ in Dᵀ·Q̂ showed ~100x in dg (2.7e-4
// and 8.0e-4 on a 171- and a 200-token shape). Leaving one product at a time unsplit in an all-split build
// (dg 6e-10, 171 tokens): D·K̂ 3.6e-4, Dᵀ·Q̂ 5.9e-5, dO·V'ᵀ 2.2e-6, every state or WY product ≤ 1.8e-7. So K̂
// and Q̂ are split into bf16 hi + lo (gdn_mma.cuh, warp_mma_split; both sides of the pair then see the same
// q̂_i·k̂_j; D stays one bf16 tile, the same in both), and dO in D = dO·V'ᵀ when it is not bf16. V', S_n,
// dS^end, dV' arrive in bf16 (rounded where they are written) and dW leaves in bf16. Measured on the
// 171-token (bf16 dO) / 200-token (fp32 dO) shapes: dqh 5.2e-6 / 5.2e-6, dkh 5.2e-6 / 5.2e-6, dg 4.2e-6
// / 5.5e-6, gsum 3.4e-6 / 4.0e-6, dW 7.9e-6 / 8.2e-6 (the two kernels before, V' split and fp32
// scratch: 2.5e-6, 2.5e-6, 2.0e-6 / 3.3e-6, 3.4e-6 / 4.0e-6, 5.3e-6 / 5.4e-6). The rise is V' in bf16 against
// the FMA kernels' fp32 V' (with V' rounded for both: dqh 2.6e-6, dg 2.0e-6 / 3.0e-6) and dW's output
// rounding.
//
// For bf16 inputs (R16, session 12) no split is needed: q and k are exact in bf16, so the single bf16 tile is
// D' = diag(scale·ρ_q)·D·diag(ρ_k) and the intra products are D'·k and D'ᵀ·q on the loaded tiles, added to
// diag(scale·ρ_q)·dQ̂_s and diag(ρ_k)·dK̂_s (divided out at the store); the dg row dots become (those)·q, ·k,
// the same sums. q, k (+ ρ) sit in two sets by item parity. State/intra kernel at 8K: 0.379 -> 0.342-0.349
// ms; emulator (171 / 200 tokens): dqh 8.3e-6 / 7.4e-6, dkh 8.3e-6 / 7.3e-6, dg 4.5e-6 / 6.6e-6.
//
// Fused dq (session 13; R16 with bf16 dO, the model's path): the HV/HK value heads of a key head run back to
// back in one block (their q, k loaded once), their scaled dQ̂ summed through the unused dO lo tile, and the
// last one stores dq = A − ρ_q²·q·(q·A) itself (see the kernel): no dq̂ per value head in global memory and
// half of the L2 backward kernel gone. 8K (2 x 4096, HK 16, HV 32): this kernel 0.340-0.347 -> 0.326-0.330
// ms, the L2 backward 0.102 -> 0.053 (k only); emulator dq nmse 6.6e-6 / 5.7e-6 against the host L2 backward
// of the FMA kernels' dq̂ (171 / 200 tokens).
#include <cuda_fp16.h>

#include <algorithm>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int NT = 256;  // 8 warps: 4 row groups (16 rows) x NWC column groups
constexpr int NWC = NT / 32 / (C / 16);

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;
using gdn_chunk::grad_item;
using gdn_chunk::GradItem;

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 ld4(const __half* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const __half* h = reinterpret_cast<const __half*>(&u);
  return make_float4(__half2float(h[0]), __half2float(h[1]), __half2float(h[2]), __half2float(h[3]));
}

// hi/lo bf16 tiles (row stride LD) of rows r < rows_ok of src (fp32 or fp16; zeros for rows_ok ≤ r < C).
template <int COLS, int LD, class T>
__device__ __forceinline__ void stage_split_rows(bf16* hi, bf16* lo, const T* src, int64_t stride, int rows_ok) {
  for_rows_batched<C, COLS, NT>(
      rows_ok, [&](int r, int c) { return ld4(src + r * stride + c); },
      [&](int r, int c, float4 x) {
        st_split_bf16x2(hi + r * LD + c, lo + r * LD + c, x.x, x.y);
        st_split_bf16x2(hi + r * LD + c + 2, lo + r * LD + c + 2, x.z, x.w);
      });
}

// hi/lo bf16 tiles [C][LD] of a [C][COLS] fp32 tile (q̂ or k̂) staged in shared memory.
template <int COLS, int LD>
__device__ __forceinline__ void split_tile(bf16* hi, bf16* lo, const void* src) {
  constexpr int Q = COLS / 4;
  for (int idx = threadIdx.x; idx < C * Q; idx += NT) {
    const int r = idx / Q, c = (idx % Q) * 4;
    const float4 x = *reinterpret_cast<const float4*>(static_cast<const float*>(src) + r * COLS + c);
    uint32_t h0, l0, h1, l1;
    split_bf16x2(h0, l0, x.x, x.y);
    split_bf16x2(h1, l1, x.z, x.w);
    *reinterpret_cast<uint2*>(hi + r * LD + c) = make_uint2(h0, h1);
    *reinterpret_cast<uint2*>(lo + r * LD + c) = make_uint2(l0, l1);
  }
}

// Σ_c X[r][c]·Y[r][c] over rows r0..r0+15 of two bf16 tiles (K columns), on the tensor cores: the trace of the
// 16x16 block (X·Yᵀ)[r0.., r0..], this lane's share (its diagonal accumulator elements).
__device__ __forceinline__ float warp_trace(const bf16* X, const bf16* Y, int ld, int r0, int K) {
  float c[2][4];
  zero(c);
  warp_mma<2, false, false>(c, X, ld, r0, Y, ld, r0, 0, K);
  const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
  if ((g >> 1) != t) return 0.f;
  return g & 1 ? c[0][1] + c[1][3] : c[0][0] + c[1][2];  // (g, g) and (g + 8, g + 8)
}

// (hi + lo)[o], [o + 1] of a pair of bf16 tiles: the fp32 value to 2^-17.
__device__ __forceinline__ float2 ld_split(const bf16* hi, const bf16* lo, int o) {
  const float2 h = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(hi + o));
  const float2 l = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(lo + o));
  return make_float2(h.x + l.x, h.y + l.y);
}

// Shared memory of the fused kernel (byte offsets), dk = dv = DK. Region A (S_n, dV', dO) is refilled with
// the next item's while region B (dS^end, V', dO lo) holds the hi/lo tiles of K̂ and Q̂. R16: q, k stay as
// loaded (bf16, padded rows, then ρ_k, ρ_q), in two sets by item parity (the next item's land during this
// one's).
template <int DK, bool R16>
struct GradSmem {
  static constexpr int LB = DK + 8;  // bf16 rows: 16 bytes of padding, ldmatrix rows on distinct banks
  static constexpr int LC = C + 8;
  static constexpr size_t kBig = 2 * size_t(DK) * LB, kRow = 2 * size_t(C) * LB, kF = 4 * size_t(C) * DK;
  static constexpr size_t kQK16 = 2 * kRow + 2 * 4 * size_t(C);    // one R16 set: k, q, ρ_k, ρ_q
  static constexpr size_t Sn = 0, dU = Sn + kBig, dO = dU + kRow,  // A
      dS = dO + kRow, Vp = dS + kBig, dOl = Vp + kRow,             // B
      Kf = dOl + kRow, Qf = Kf + kF, D = Kf + (R16 ? 2 * kQK16 : 2 * kF), G = D + 2 * size_t(C) * LC,
                          rq = G + 4 * 2 * C, rk = rq + 4 * NWC * C, red = rk + 4 * NWC * C,
                          sqg = red + 4 * (NT / 32), bytes = sqg + 4 * size_t(C);
  static_assert(kBig + 2 * kRow == 4 * kRow, "B takes four 64-row tiles");
};

template <int DK, int DV, bool R16>
constexpr size_t grad_mma_smem() {
  return GradSmem<DK, R16>::bytes;
}

// Persistent: block b takes items b, b + gridDim.x, ... While one item's intra products and epilogue run, the
// next item's S_n, dV', dO, G (region A) and K̂, Q̂ (fp32 tiles) land; its dS^end and V' (region B, which holds
// the hi/lo tiles until then) are issued when it starts, behind its first two products. cp.async groups per
// item, in commit order: A (during the previous item), KQ (likewise), B.
template <int DK, int DV, bool R16>
__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_grad_mma_kernel(KIn dout, GdnQK qk, const float* Gc, const int32_t* chunks, int nitems,
                              const bf16* states, const bf16* dh, const bf16* vnew, const bf16* dvn,
                              bf16* dqh, bf16* dkh, bf16* dW, float* gsum, float* dg, int64_t HK, int64_t HV,
                              KOut dq, const bf16* states_odd = nullptr) {
  static_assert(DK == DV && DK % (16 * NWC) == 0 && DK / 16 <= NT / 32, "NWC warps share DK; a warp per trace");
  using L = GradSmem<DK, R16>;
  constexpr int LB = L::LB, LC = L::LC, NB = DK / NWC / 8, DNB = C / NWC / 8;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Ss = reinterpret_cast<bf16*>(gdn_smem + L::Sn);    // [DK][LB]
  bf16* dUs = reinterpret_cast<bf16*>(gdn_smem + L::dU);   // [C][LB]
  bf16* dOs = reinterpret_cast<bf16*>(gdn_smem + L::dO);   // [C][LB]
  bf16* dSs = reinterpret_cast<bf16*>(gdn_smem + L::dS);   // [DK][LB]
  bf16* Vps = reinterpret_cast<bf16*>(gdn_smem + L::Vp);   // [C][LB]
  bf16* dOl = reinterpret_cast<bf16*>(gdn_smem + L::dOl);  // [C][LB] dO lo (dO not bf16)
  bf16 *Kh = dSs, *Kl = Kh + C * LB, *Qh = Kl + C * LB, *Ql = Qh + C * LB;  // region B after the state products
  // K̂, Q̂ staged: [C][DK] fp32, or (R16) k, q before the norm ([C][LB] bf16, the set of the item's parity)
  // followed by the rows' ρ_k, ρ_q [C]
  unsigned char* Kf = gdn_smem + L::Kf;
  unsigned char* Qf = gdn_smem + L::Qf;
  auto k16 = [&](int par) { return reinterpret_cast<bf16*>(gdn_smem + L::Kf + par * L::kQK16); };
  auto q16 = [&](int par) { return k16(par) + C * LB; };
  auto rho_k = [&](int par) { return reinterpret_cast<float*>(q16(par) + C * LB); };
  auto rho_q = [&](int par) { return rho_k(par) + C; };
  bf16* Db = reinterpret_cast<bf16*>(gdn_smem + L::D);     // [C][LC]
  float* Gb = reinterpret_cast<float*>(gdn_smem + L::G);   // [2][C], by item parity
  float* rq = reinterpret_cast<float*>(gdn_smem + L::rq);  // [NWC][C] row sums of dQ̂ ⊙ Q̂ per column group
  float* rk = reinterpret_cast<float*>(gdn_smem + L::rk);  // [NWC][C] row sums of dK̂ ⊙ K̂
  float* red = reinterpret_cast<float*>(gdn_smem + L::red);  // [NT / 32] per-warp shares of gsum
  float* sqg = reinterpret_cast<float*>(gdn_smem + L::sqg);  // [C] fused dq: Σ over the group's heads of q·A
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3, wc = warp >> 2, m0 = 16 * (warp & 3), n0 = (DK / NWC) * wc;
  const int64_t rs = HV * DV, ks = HK * DK;  // row strides of (T, HV, ·) and (T, HK, dk) tensors
  const bool dO16 = dout.t == KType::BF16;
  auto load_a = [&](const GradItem& it, float* G) {
    // The chunk's state: states[chunk], or with states_odd the even chunks' at states[chunk / 2] and the odd
    // ones' at states_odd[chunk / 2] (GdnHalfStates).
    const int64_t ch = it.hs / HV, sl = states_odd ? (ch >> 1) * HV + it.hs % HV : it.hs;
    cp_rows<DK, DV, LB, NT>(Ss, (states_odd && (ch & 1) ? states_odd : states) + sl * DK * DV, DV, DK);
    cp_rows<C, DV, LB, NT>(dUs, dvn + it.rv, rs, it.cr.len);
    if (dO16) cp_rows<C, DV, LB, NT>(dOs, static_cast<const bf16*>(dout.p) + it.rv, rs, it.cr.len);
    if (tid < C) {
      const bool ok = tid < it.cr.len;
      mma::cp_async4(mma::smem_addr(G + tid), ok ? Gc + (it.cr.t0 + tid) * HV + it.h : Gc, ok);
    }
  };
  auto load_kq = [&](const GradItem& it, int par) {
    if constexpr (R16) {
      cp_rows<C, DK, LB, NT>(k16(par), static_cast<const bf16*>(qk.k.p) + it.rkq, ks, it.cr.len);
      cp_rows<C, DK, LB, NT>(q16(par), static_cast<const bf16*>(qk.q.p) + it.rkq, ks, it.cr.len);
      if (tid < 2 * C) {  // ρ of the rows: (t0 + i)·HK + hk = rkq / DK + i·HK (zeros past the chunk's end)
        const int i = tid % C;
        const bool ok = i < it.cr.len;
        const float* src = (tid < C ? qk.rk : qk.rq) + it.rkq / DK + (ok ? i * HK : 0);
        mma::cp_async4(mma::smem_addr((tid < C ? rho_k(par) : rho_q(par)) + i), src, ok);
      }
    } else {
      cp_rows<C, DK, DK, NT>(reinterpret_cast<float*>(Kf), static_cast<const float*>(qk.k.p) + it.rkq, ks,
                             it.cr.len);
      cp_rows<C, DK, DK, NT>(reinterpret_cast<float*>(Qf), static_cast<const float*>(qk.q.p) + it.rkq, ks,
                             it.cr.len);
    }
  };

  // With dq (R16 and bf16 dO only, see the launcher) a block takes the r = HV/HK value heads of a key head
  // (a group: items g·r .. g·r + r − 1, one chunk) back to back and finishes dq itself: the group's sum of
  // dQ̂ (as carried, diag(scale·ρ_q)·dQ̂) waits in the unused dO lo tile as bf16 words (each thread its own,
  // as the per-head dq̂ stores rounded them), the row dots of the heads add up in sqg, and the last head
  // stores dq = A − ρ_q²·q·(q·A), A = scale·ρ_q·Σ_h dQ̂_h: the L2 norm's backward (l2norm.cu) without dq̂ in
  // global memory. q, k (the group's) are loaded once per group; G per item.
  const bool fuse = R16 && dq.p != nullptr;
  const int r = fuse ? static_cast<int>(HV / HK) : 1, ngroups = nitems / r;
  static_assert(2 * NB * NT * sizeof(uint32_t) <= L::kRow, "the dQ̂ stash fits in the dO lo tile");
  uint32_t* stash = reinterpret_cast<uint32_t*>(dOl) + tid;  // word w of this thread: stash[w·NT]
  GradItem it = grad_item<DK, DV>(blockIdx.x * r, chunks, HK, HV);
  load_a(it, Gb);
  mma::cp_async_commit();
  load_kq(it, 0);
  mma::cp_async_commit();
  for (int grp = blockIdx.x, j = 0, par = 0, qpar = 0; grp < ngroups; par ^= 1) {
    const ChunkRef cr = it.cr;
    const bool last = j + 1 == r;  // the group's last value head
    const int ngrp = last ? grp + static_cast<int>(gridDim.x) : grp, nj = last ? 0 : j + 1;
    const bool more = ngrp < ngroups;
    const GradItem next = more ? grad_item<DK, DV>(ngrp * r + nj, chunks, HK, HV) : it;
    const float* G = Gb + par * C;
    cp_rows<DK, DV, LB, NT>(dSs, dh + it.hs * DK * DV, DV, DK);
    cp_rows<C, DV, LB, NT>(Vps, vnew + it.rv, rs, cr.len);
    mma::cp_async_commit();
    if (dout.t == KType::F32)
      stage_split_rows<DV, LB>(dOs, dOl, static_cast<const float*>(dout.p) + it.rv, rs, cr.len);
    else if (!dO16)
      stage_split_rows<DV, LB>(dOs, dOl, static_cast<const __half*>(dout.p) + it.rv, rs, cr.len);
    mma::cp_async_wait<2>();
    __syncthreads();  // A
    float aq[NB][4], ak[NB][4];
    {  // dW = −dV'·S_nᵀ
      float aw[NB][4];
      zero(aw);
      warp_mma<NB, false, false>(aw, dUs, LB, m0, Ss, LB, n0, 0, DV);
      store_tile_bf16(dW + it.rv, HV * DK, aw, m0, n0, cr.len, -1.f);
    }
    zero(aq);
    warp_mma<NB, false, false>(aq, dOs, LB, m0, Ss, LB, n0, 0, DV);
    mma::cp_async_wait<0>();
    __syncthreads();  // B, K̂, Q̂
    {  // D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}): warp tile rows 16wr..+15 x columns (C/NWC)·wc..
      const int j0 = (C / NWC) * wc;
      float d[DNB][4];
      zero(d);
      if (dO16) warp_mma<DNB, false, false>(d, dOs, LB, m0, Vps, LB, j0, 0, DV);
      else warp_mma_split<DNB, false, false, true, false>(d, dOs, dOl, LB, m0, Vps, nullptr, LB, j0, 0, DV);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + g + 8 * hf;
        const float qi = R16 ? qk.scale * rho_q(qpar)[i] : 1.f;  // R16: D' = diag(scale·ρ_q)·D·diag(ρ_k)
#pragma unroll
        for (int nb = 0; nb < DNB; ++nb) {
          const int j = j0 + 8 * nb + 2 * t4;
          float x[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float dd = R16 ? qi * d[nb][2 * hf + e] * rho_k(qpar)[j + e] : d[nb][2 * hf + e];
            x[e] = (i >= j + e && i < cr.len) ? dd * expf(G[i] - G[j + e]) : 0.f;
          }
          st_bf16x2(Db + i * LC + j, x[0], x[1]);
        }
      }
    }
    zero(ak);
    warp_mma<NB, false, false>(ak, Vps, LB, m0, dSs, LB, n0, 0, DV);
    // this lane's share of Σ(S_n ⊙ dS^end)
    const float local = warp < DK / 16 ? warp_trace(Ss, dSs, LB, 16 * warp, DV) : 0.f;
    __syncthreads();  // regions A and B read; D complete
    if (more) load_a(next, Gb + (par ^ 1) * C);
    mma::cp_async_commit();
    if constexpr (!R16) {
      split_tile<DK, LB>(Kh, Kl, Kf);
      split_tile<DK, LB>(Qh, Ql, Qf);
      __syncthreads();  // the hi/lo tiles; K̂, Q̂ fp32 read
    }
    if (more && last) load_kq(next, qpar ^ 1);
    mma::cp_async_commit();
    const float Gl = G[cr.len - 1];
    // R16: q, k as loaded (exact in bf16) with D' (see D): dQ̂ is kept as diag(scale·ρ_q)·dQ̂ and dK̂ as
    // diag(ρ_k)·dK̂ until the store, so that D'·k and D'ᵀ·q add to them and the row dots with q, k are the
    // same sums (no hi + lo tiles, one product each).
    const bf16 *Kr = R16 ? k16(qpar) : Kh, *Qr = R16 ? q16(qpar) : Qh;
    float kpart = 0.f;  // Σ(dK̂_s ⊙ K̂) over this thread's elements
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      float eq = expf(G[i]), ek = i < cr.len ? expf(Gl - G[i]) : 0.f;
      if (R16) eq *= qk.scale * rho_q(qpar)[i], ek *= rho_k(qpar)[i];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int o = i * LB + n0 + 8 * nb + 2 * t4;
        const float2 k =
            R16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Kr + o)) : ld_split(Kh, Kl, o);
        aq[nb][2 * hf] *= eq, aq[nb][2 * hf + 1] *= eq;
        ak[nb][2 * hf] *= ek, ak[nb][2 * hf + 1] *= ek;
        kpart += ak[nb][2 * hf] * k.x + ak[nb][2 * hf + 1] * k.y;
      }
    }
    // dQ̂ += D·K̂ (D_ij = 0 for j > i), dK̂ += Dᵀ·Q̂ (D_ji = 0 for j < i)
    if (R16) {
      warp_mma<NB, false, true>(aq, Db, LC, m0, Kr, LB, n0, 0, m0 + 16);
      warp_mma<NB, true, true>(ak, Db, LC, m0, Qr, LB, n0, m0, C);
    } else {
      warp_mma_split<NB, false, true, false, true>(aq, Db, nullptr, LC, m0, Kh, Kl, LB, n0, 0, m0 + 16);
      warp_mma_split<NB, true, true, false, true>(ak, Db, nullptr, LC, m0, Qh, Ql, LB, n0, m0, C);
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      float sq = 0.f, sk = 0.f;
      if (i < cr.len) {
        const int64_t o = it.rv + i * rs;
        // rows < len have ρ > 0
        const float uq = R16 ? 1.f / (qk.scale * rho_q(qpar)[i]) : 1.f, uk = R16 ? 1.f / rho_k(qpar)[i] : 1.f;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int d = n0 + 8 * nb + 2 * t4;
          const float2 q = make_float2(aq[nb][2 * hf], aq[nb][2 * hf + 1]);
          const float2 k = make_float2(ak[nb][2 * hf], ak[nb][2 * hf + 1]);
          if (!fuse) st_bf16x2(dqh + o + d, uq * q.x, uq * q.y);
          st_bf16x2(dkh + o + d, uk * k.x, uk * k.y);
          const float2 qv =
                           R16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Qr + i * LB + d))
                               : ld_split(Qh, Ql, i * LB + d),
                       kv =
                           R16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Kr + i * LB + d))
                               : ld_split(Kh, Kl, i * LB + d);
          sq += q.x * qv.x + q.y * qv.y;
          sk += k.x * kv.x + k.y * kv.y;
        }
      }
      sq = gdn_chunk::quad_sum(sq);
      sk = gdn_chunk::quad_sum(sk);
      if (t4 == 0) {
        rq[wc * C + i] = sq;
        rk[wc * C + i] = sk;
      }
    }
    if (fuse) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          uint32_t* w = stash + (2 * nb + hf) * NT;
          if (j > 0) {
            const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(w));
            aq[nb][2 * hf] += p.x, aq[nb][2 * hf + 1] += p.y;
          }
          if (!last) *w = mma::pack_bf16(aq[nb][2 * hf], aq[nb][2 * hf + 1]);
        }
    }
    const float part = warp_sum(expf(Gl) * local + kpart);
    if (lane == 0) red[warp] = part;
    __syncthreads();
    float total = 0.f;  // gsum, summed in the same order by every thread
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) total += red[w];
    if (tid == 0) gsum[it.hs] = total;
    if (tid < cr.len) {
      float sq = 0.f, sk = 0.f;
#pragma unroll
      for (int w = 0; w < NWC; ++w) sq += rq[w * C + tid], sk += rk[w * C + tid];
      dg[(cr.t0 + tid) * HV + it.h] = sq - sk + (tid == cr.len - 1 ? total : 0.f);
      if (fuse) sqg[tid] = (j > 0 ? sqg[tid] : 0.f) + sq;
    }
    __syncthreads();  // the item's shared memory reads are done
    if (fuse && last) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + g + 8 * hf;
        if (i >= cr.len) continue;
        const float rho = rho_q(qpar)[i], c = rho * rho * sqg[i];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int d = n0 + 8 * nb + 2 * t4;
          const float2 qv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Qr + i * LB + d));
          st_pair<true>(dq, it.rkq + i * ks + d, aq[nb][2 * hf] - c * qv.x, aq[nb][2 * hf + 1] - c * qv.y);
        }
      }
    }
    it = next, grp = ngrp, j = nj;
    if (last) qpar ^= 1;
  }
}

}  // namespace

bool gdn_chunk_mma_supported(int dk, int dv) { return dk == 128 && dv == 128; }

bool gdn_grad_fuses_dq(const GdnQK& qk, KIn dout, KOut dq, int64_t HK, int64_t HV) {
  const bool aligned = reinterpret_cast<uintptr_t>(dq.p) % 8 == 0;  // the kernel's dq stores: st_pair<true>
  return gdn_qk_kind(qk) == 1 && dout.t == KType::BF16 && HK > 0 && HV % HK == 0 && aligned;
}

#ifndef DT_ATTN_EMU  // launcher: not part of the host emulation build (dev/emu/gdn)
size_t gdn_chunk_grad_mma_smem(bool raw) {
  return raw ? grad_mma_smem<128, 128, true>() : grad_mma_smem<128, 128, false>();
}

cudaError_t launch_gdn_chunk_grad_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const float* Gc,
                                      const int32_t* chunks, int nchunks, const void* states16,
                                      const void* dh16, const void* vnew16, const void* dvn16, void* dqh16,
                                      void* dkh16, void* dW16, float* gsum, float* dg, int64_t HK, int64_t HV,
                                      int dk, int dv, cudaStream_t s, KOut dq, const void* states_odd16,
                                      int64_t T) {
  const int kind = gdn_qk_kind(qk);
  if (!gdn_chunk_mma_supported(dk, dv) || kind < 0) return cudaErrorInvalidValue;
  if (dq.p && !gdn_grad_fuses_dq(qk, dout, dq, HK, HV)) return cudaErrorInvalidValue;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  if (gdn_grad_wgmma_selected(pol, qk, dout, dk,
                              dv)) {  // Hopper: wgmma + TMA, unless no tensor maps (T unknown)
    const cudaError_t e =
        launch_gdn_chunk_grad_wgmma(pol, dout, qk, Gc, chunks, nchunks, states16, dh16, vnew16, dvn16, dqh16,
                                    dkh16, dW16, gsum, dg, HK, HV, s, dq, states_odd16, T);
    if (e != cudaErrorNotSupported) return e;
  }
  auto* kern =
      kind == 1 ? gdn_chunk_grad_mma_kernel<128, 128, true> : gdn_chunk_grad_mma_kernel<128, 128, false>;
  const size_t smem = kind == 1 ? grad_mma_smem<128, 128, true>() : grad_mma_smem<128, 128, false>();
  cudaError_t e = set_launch_smem(pol, kern, smem);
  if (e != cudaSuccess) return e;
  const int items = nchunks * static_cast<int>(HV);
  const int sms = pol.sm_count;
  int per_sm = 1;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem);
  if (e != cudaSuccess) return e;
  const int groups = dq.p ? items / static_cast<int>(HV / HK) : items;
  const int grid = std::min(groups, sms * std::max(per_sm, 1));
  kern<<<grid, NT, smem, s>>>(dout, qk, Gc, chunks, items, static_cast<const bf16*>(states16),
                              static_cast<const bf16*>(dh16), static_cast<const bf16*>(vnew16),
                              static_cast<const bf16*>(dvn16), static_cast<bf16*>(dqh16),
                              static_cast<bf16*>(dkh16), static_cast<bf16*>(dW16), gsum, dg, HK, HV, dq,
                              static_cast<const bf16*>(states_odd16));
  return cudaGetLastError();
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
