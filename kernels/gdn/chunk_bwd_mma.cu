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
// Layout: a work item is (chunk of 64 tokens, value head); a persistent grid of 256-thread blocks loops over
// the items, value heads fastest (the second value head of a key head finds K̂, Q̂ in L2). Warp (wr, wc) owns
// rows 16wr..+15 x key columns 64wc..+63 of each 64 x 128 product. Every state product contracts over the
// value columns, so an item takes them in two halves of 64 (session 22, for the 99 KiB of sm_86/89/120): per
// half, S_n, dV', dO (then dS^end, V') of those columns land by cp.async in region X and the products run over
// the half's k range into accumulators that span both halves: the same mma sequence, bit for bit, as one pass
// over all 128 columns (the earlier kernel held both halves and the next item's inputs at once: 215,840 /
// 220,960 B). Then region X takes K̂ and Q̂ (fp32 q̂, k̂ split into bf16 hi + lo tiles while loading, or for bf16
// inputs q and k before the norm by cp.async, their rows' ρ coming with the first half: GdnQK). fp32/fp16 dO
// goes through registers into hi + lo tiles (lo in region Y).
//
// Why fused (not two kernels at two blocks per SM): per item the inputs are 176 KiB (bf16 dO, V', dV' 16
// each, S_n, dS^end 32 each, fp32 K̂, Q̂ 32 each) and the outputs 80 KiB (dQ̂, dK̂ 32 each, bf16 dW 16); two
// kernels move 448 KiB (the intra kernel re-stages dO, V', K̂, Q̂ and reads dQ̂, dK̂ back to add to them).
//
// Resources (ptxas, sm_86): 246 registers (R16: 244), no spills; 97,312 bytes of shared memory (R16: 92,192).
// mma per item (dk = dv = 128): 2560 (state products 1536, D 256, intra 640 with the hi/lo splits, trace 128);
// 2816 with fp32 dO. The Hopper policy runs chunk_grad_wgmma.cu for the model's inputs (bf16 q, k, dO).
//
// Time (H100, the one-pass kernel of sessions 8-21, against the two kernels it replaced): T = 8192 tokens as
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

// Σ_c X[r][c]·Y[r][c] over rows r0..r0+15 of two bf16 tiles: the trace of the 16x16 block (X·Yᵀ)[r0.., r0..]
// on the tensor cores. trace_acc adds the k range [0, K) to c (once per value-column half, in order);
// trace_share is this lane's share of the trace (its diagonal accumulator elements).
__device__ __forceinline__ void trace_acc(float (&c)[2][4], const bf16* X, const bf16* Y, int ld, int r0, int K) {
  warp_mma<2, false, false>(c, X, ld, r0, Y, ld, r0, 0, K);
}
__device__ __forceinline__ float trace_share(const float (&c)[2][4]) {
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

// Shared memory of the kernel (byte offsets), dk = dv = DK. Region X holds one value-column half of the state
// products' operands (S_n, dS^end: DK rows; dV', dO, V': C rows; VH columns each), then, for the intra
// products, K̂ and Q̂ (bf16 hi + lo tiles, or R16: k and q as loaded). Region Y holds dO's lo half (dO not
// bf16) or the fused dq's dQ̂ stash. G and ρ (R16) of the item come with its first half.
template <int DK, bool R16>
struct GradSmem {
  static constexpr int VH = DK / 2;   // value columns per half
  static constexpr int LH = VH + 8;   // bf16 rows of a half: 16 bytes of padding (distinct ldmatrix banks)
  static constexpr int LB = DK + 8;   // bf16 rows of K̂, Q̂
  static constexpr int LC = C + 8;
  static constexpr size_t kBigH = 2 * size_t(DK) * LH, kRowH = 2 * size_t(C) * LH, kRow = 2 * size_t(C) * LB;
  static constexpr size_t kHalf = 2 * kBigH + 3 * kRowH, kKQ = (R16 ? 2 : 4) * kRow;
  static constexpr size_t kY = 2 * (DK / NWC / 8) * NT * sizeof(uint32_t);  // the dQ̂ stash (≥ a dO lo half)
  static constexpr size_t Sn = 0, dS = Sn + kBigH, dU = dS + kBigH, dO = dU + kRowH, Vp = dO + kRowH,
                          KQ = 0, Y = kHalf > kKQ ? kHalf : kKQ, D = Y + kY, G = D + 2 * size_t(C) * LC,
                          rho = G + 4 * size_t(C), rq = rho + 4 * 2 * size_t(C), rk = rq + 4 * NWC * C,
                          red = rk + 4 * NWC * C, sqg = red + 4 * (NT / 32), bytes = sqg + 4 * size_t(C);
  static_assert(kY >= kRowH, "a dO lo half fits region Y");
};

template <int DK, int DV, bool R16>
constexpr size_t grad_mma_smem() {
  return GradSmem<DK, R16>::bytes;
}

// Persistent: block b takes items b, b + gridDim.x, ... (or groups of items, fused dq). Per item: for each
// value-column half, two cp.async groups (S_n, dV', dO (+ G, ρ with the first half); then dS^end, V'), the
// products over the half's k range into the accumulators that span both halves (the same mma sequence as
// one pass over DV, so the same sums); then K̂, Q̂ into region X and the intra products.
template <int DK, int DV, bool R16>
__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_grad_mma_kernel(KIn dout, GdnQK qk, const float* Gc, const int32_t* chunks, int nitems,
                              const bf16* states, const bf16* dh, const bf16* vnew, const bf16* dvn,
                              bf16* dqh, bf16* dkh, bf16* dW, float* gsum, float* dg, int64_t HK, int64_t HV,
                              KOut dq, const bf16* states_odd = nullptr) {
  static_assert(DK == DV && DK % (16 * NWC) == 0 && DK / 16 <= NT / 32, "NWC warps share DK; a warp per trace");
  using L = GradSmem<DK, R16>;
  constexpr int VH = L::VH, LH = L::LH, LB = L::LB, LC = L::LC, NB = DK / NWC / 8, DNB = C / NWC / 8;
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Ss = reinterpret_cast<bf16*>(gdn_smem + L::Sn);   // [DK][LH] S_n, the half's columns
  bf16* dSs = reinterpret_cast<bf16*>(gdn_smem + L::dS);  // [DK][LH] dS^end
  bf16* dUs = reinterpret_cast<bf16*>(gdn_smem + L::dU);  // [C][LH] dV'
  bf16* dOs = reinterpret_cast<bf16*>(gdn_smem + L::dO);  // [C][LH] dO (hi when not bf16)
  bf16* Vps = reinterpret_cast<bf16*>(gdn_smem + L::Vp);  // [C][LH] V'
  bf16* dOl = reinterpret_cast<bf16*>(gdn_smem + L::Y);   // [C][LH] dO lo (dO not bf16)
  // Intra: K̂, Q̂ hi + lo [C][LB] each, or (R16) k, q before the norm [C][LB]
  bf16 *Kh = reinterpret_cast<bf16*>(gdn_smem + L::KQ), *Kl = Kh + C * LB, *Qh = Kl + C * LB, *Ql = Qh + C * LB;
  bf16 *k16 = Kh, *q16 = Kl;
  bf16* Db = reinterpret_cast<bf16*>(gdn_smem + L::D);       // [C][LC]
  float* G = reinterpret_cast<float*>(gdn_smem + L::G);      // [C]
  float* rho_k = reinterpret_cast<float*>(gdn_smem + L::rho);  // [C] (R16)
  float* rho_q = rho_k + C;                                    // [C] (R16)
  float* rq = reinterpret_cast<float*>(gdn_smem + L::rq);  // [NWC][C] row sums of dQ̂ ⊙ Q̂ per column group
  float* rk = reinterpret_cast<float*>(gdn_smem + L::rk);  // [NWC][C] row sums of dK̂ ⊙ K̂
  float* red = reinterpret_cast<float*>(gdn_smem + L::red);  // [NT / 32] per-warp shares of gsum
  float* sqg = reinterpret_cast<float*>(gdn_smem + L::sqg);  // [C] fused dq: Σ over the group's heads of q·A
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3, wc = warp >> 2, m0 = 16 * (warp & 3), n0 = (DK / NWC) * wc;
  const int64_t rs = HV * DV, ks = HK * DK;  // row strides of (T, HV, ·) and (T, HK, dk) tensors
  const bool dO16 = dout.t == KType::BF16;
  // Half h of the item's state-product operands: S_n, dV', dO (group 1; with G and ρ when h = 0), then
  // dS^end, V' (group 2).
  auto load_half = [&](const GradItem& it, int h) {
    // The chunk's state: states[chunk], or with states_odd the even chunks' at states[chunk / 2] and the odd
    // ones' at states_odd[chunk / 2] (GdnHalfStates).
    const int64_t ch = it.hs / HV, sl = states_odd ? (ch >> 1) * HV + it.hs % HV : it.hs;
    const int64_t c0 = int64_t(h) * VH;
    cp_rows<DK, VH, LH, NT>(Ss, (states_odd && (ch & 1) ? states_odd : states) + sl * DK * DV + c0, DV, DK);
    cp_rows<C, VH, LH, NT>(dUs, dvn + it.rv + c0, rs, it.cr.len);
    if (dO16) cp_rows<C, VH, LH, NT>(dOs, static_cast<const bf16*>(dout.p) + it.rv + c0, rs, it.cr.len);
    if (h == 0 && tid < C) {
      const bool ok = tid < it.cr.len;
      mma::cp_async4(mma::smem_addr(G + tid), ok ? Gc + (it.cr.t0 + tid) * HV + it.h : Gc, ok);
    }
    if (R16 && h == 0 && tid >= NT - 2 * C) {  // ρ of the rows: (t0 + i)·HK + hk = rkq / DK + i·HK (zeros past the end)
      const int i = tid % C;
      const bool kk = tid < NT - C, ok = i < it.cr.len;
      const float* src = (kk ? qk.rk : qk.rq) + it.rkq / DK + (ok ? i * HK : 0);
      mma::cp_async4(mma::smem_addr((kk ? rho_k : rho_q) + i), src, ok);
    }
    mma::cp_async_commit();
    cp_rows<DK, VH, LH, NT>(dSs, dh + it.hs * DK * DV + c0, DV, DK);
    cp_rows<C, VH, LH, NT>(Vps, vnew + it.rv + c0, rs, it.cr.len);
    mma::cp_async_commit();
    if (dout.t == KType::F32)
      stage_split_rows<VH, LH>(dOs, dOl, static_cast<const float*>(dout.p) + it.rv + c0, rs, it.cr.len);
    else if (!dO16)
      stage_split_rows<VH, LH>(dOs, dOl, static_cast<const __half*>(dout.p) + it.rv + c0, rs, it.cr.len);
  };

  // With dq (R16 and bf16 dO only, see the launcher) a block takes the r = HV/HK value heads of a key head
  // (a group: items g·r .. g·r + r − 1, one chunk) back to back and finishes dq itself: the group's sum of
  // dQ̂ (as carried, diag(scale·ρ_q)·dQ̂) waits in region Y as bf16 words (each thread its own, as the
  // per-head dq̂ stores rounded them), the row dots of the heads add up in sqg, and the last head stores
  // dq = A − ρ_q²·q·(q·A), A = scale·ρ_q·Σ_h dQ̂_h: the L2 norm's backward (l2norm.cu) without dq̂ in global
  // memory.
  const bool fuse = R16 && dq.p != nullptr;
  const int r = fuse ? static_cast<int>(HV / HK) : 1, ngroups = nitems / r;
  static_assert(2 * NB * NT * sizeof(uint32_t) <= L::kY, "the dQ̂ stash fits in region Y");
  uint32_t* stash = reinterpret_cast<uint32_t*>(gdn_smem + L::Y) + tid;  // word w of this thread: stash[w·NT]
  GradItem it = grad_item<DK, DV>(blockIdx.x * r, chunks, HK, HV);
  for (int grp = blockIdx.x, j = 0; grp < ngroups;) {
    const ChunkRef cr = it.cr;
    const bool last = j + 1 == r;  // the group's last value head
    float aw[NB][4], aq[NB][4], ak[NB][4], d[DNB][4], tc[2][4];
    zero(aw), zero(aq), zero(ak), zero(d), zero(tc);
    const int j0 = (C / NWC) * wc;  // D: warp tile rows 16wr..+15 x columns (C/NWC)·wc..
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      __syncthreads();  // region X free: the previous half's (or item's) reads are done
      load_half(it, h);
      mma::cp_async_wait<1>();
      __syncthreads();  // S_n, dV', dO
      warp_mma<NB, false, false>(aw, dUs, LH, m0, Ss, LH, n0, 0, VH);  // dW = −dV'·S_nᵀ
      warp_mma<NB, false, false>(aq, dOs, LH, m0, Ss, LH, n0, 0, VH);  // dQ̂_s = dO·S_nᵀ (diag(γ) below)
      mma::cp_async_wait<0>();
      __syncthreads();  // dS^end, V'
      if (dO16) warp_mma<DNB, false, false>(d, dOs, LH, m0, Vps, LH, j0, 0, VH);  // dO·V'ᵀ
      else warp_mma_split<DNB, false, false, true, false>(d, dOs, dOl, LH, m0, Vps, nullptr, LH, j0, 0, VH);
      warp_mma<NB, false, false>(ak, Vps, LH, m0, dSs, LH, n0, 0, VH);  // dK̂_s = V'·dS^endᵀ (diag(Γ/γ) below)
      if (warp < DK / 16) trace_acc(tc, Ss, dSs, LH, 16 * warp, VH);    // Σ(S_n ⊙ dS^end), a 16-row block
    }
    store_tile_bf16(dW + it.rv, HV * DK, aw, m0, n0, cr.len, -1.f);
    __syncthreads();  // region X read
    if constexpr (R16) {
      cp_rows<C, DK, LB, NT>(k16, static_cast<const bf16*>(qk.k.p) + it.rkq, ks, cr.len);
      cp_rows<C, DK, LB, NT>(q16, static_cast<const bf16*>(qk.q.p) + it.rkq, ks, cr.len);
      mma::cp_async_commit();
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {  // D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}) → bf16
      const int i = m0 + g + 8 * hf;
      const float qi = R16 ? qk.scale * rho_q[i] : 1.f;  // R16: D' = diag(scale·ρ_q)·D·diag(ρ_k)
#pragma unroll
      for (int nb = 0; nb < DNB; ++nb) {
        const int jj = j0 + 8 * nb + 2 * t4;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float dd = R16 ? qi * d[nb][2 * hf + e] * rho_k[jj + e] : d[nb][2 * hf + e];
          x[e] = (i >= jj + e && i < cr.len) ? dd * expf(G[i] - G[jj + e]) : 0.f;
        }
        st_bf16x2(Db + i * LC + jj, x[0], x[1]);
      }
    }
    const float local = trace_share(tc);  // this lane's share of Σ(S_n ⊙ dS^end)
    if constexpr (R16) {
      mma::cp_async_wait<0>();
    } else {
      stage_split_rows<DK, LB>(Kh, Kl, static_cast<const float*>(qk.k.p) + it.rkq, ks, cr.len);
      stage_split_rows<DK, LB>(Qh, Ql, static_cast<const float*>(qk.q.p) + it.rkq, ks, cr.len);
    }
    __syncthreads();  // D, K̂, Q̂
    const float Gl = G[cr.len - 1];
    // R16: q, k as loaded (exact in bf16) with D' (see D): dQ̂ is kept as diag(scale·ρ_q)·dQ̂ and dK̂ as
    // diag(ρ_k)·dK̂ until the store, so that D'·k and D'ᵀ·q add to them and the row dots with q, k are the
    // same sums (no hi + lo tiles, one product each).
    const bf16 *Kr = R16 ? k16 : Kh, *Qr = R16 ? q16 : Qh;
    float kpart = 0.f;  // Σ(dK̂_s ⊙ K̂) over this thread's elements
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      float eq = expf(G[i]), ek = i < cr.len ? expf(Gl - G[i]) : 0.f;
      if (R16) eq *= qk.scale * rho_q[i], ek *= rho_k[i];
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
        const float uq = R16 ? 1.f / (qk.scale * rho_q[i]) : 1.f, uk = R16 ? 1.f / rho_k[i] : 1.f;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int dd = n0 + 8 * nb + 2 * t4;
          const float2 q = make_float2(aq[nb][2 * hf], aq[nb][2 * hf + 1]);
          const float2 k = make_float2(ak[nb][2 * hf], ak[nb][2 * hf + 1]);
          if (!fuse) st_bf16x2(dqh + o + dd, uq * q.x, uq * q.y);
          st_bf16x2(dkh + o + dd, uk * k.x, uk * k.y);
          const float2 qv =
                           R16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Qr + i * LB + dd))
                               : ld_split(Qh, Ql, i * LB + dd),
                       kv =
                           R16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Kr + i * LB + dd))
                               : ld_split(Kh, Kl, i * LB + dd);
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
    __syncthreads();  // sqg complete; red, rq, rk read
    if (fuse && last) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + g + 8 * hf;
        if (i >= cr.len) continue;
        const float rho = rho_q[i], c = rho * rho * sqg[i];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int dd = n0 + 8 * nb + 2 * t4;
          const float2 qv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Qr + i * LB + dd));
          st_pair<true>(dq, it.rkq + i * ks + dd, aq[nb][2 * hf] - c * qv.x, aq[nb][2 * hf + 1] - c * qv.y);
        }
      }
    }
    if (last) grp += static_cast<int>(gridDim.x), j = 0;
    else ++j;
    if (grp < ngroups) it = grad_item<DK, DV>(grp * r + j, chunks, HK, HV);
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
