// The half-states backward's lean prep (gdn_chunk_prep_mma_kernel<true, true>, chunk_prep_mma.cu: bf16 q, k,
// the kept T, image outputs) on Hopper's warpgroup tensor cores with TMA copies (sm_90a). Per work item
// (chunk, value head), the same outputs by the same arithmetic:
//   G = cumsum(g) in the prep's order (Gc); ρ_k, ρ_q from the tiles with the L2 norm's lanes and sums
//   (written by a key head's first value head) or, where the forward prep kept them (GdnNormOut::rho_kept),
//   read by the producer warp with the gates; M = diag(scale·ρ_q)·(q·kᵀ)·diag(ρ_k) ⊙ e^{G_i−G_j} on i ≥ j
//   (one bf16 product, m64n32 per warpgroup) and W = T'·k with T' = T·diag(β·e^G·ρ_k) split into bf16 hi + lo
//   (two products, m64n64 per warpgroup), both as the scan's operand images (gdn_scan_image_index).
// With ρ kept it also forms the odd chunks' states in the same pass (ODD, LeanOdd: odd_states_wgmma.cu's
// contract and arithmetic, bit for bit): an even chunk's item reuses its k tile, ρ_k and G for S_{2p+1}.
// Pipeline (a persistent grid of two blocks per SM, each two consumer warpgroups and a producer warp): q, k
// and T (32-byte swizzled tiles by TMA) and the per-row G, β (and kept ρ) in two sets by item parity, filled
// by the producer warp once the consumers release a set (mbarriers full/empty), its gate values loaded one
// item ahead. The consumers issue q·kᵀ, form ρ meanwhile (unless kept), and meet at named barriers per item
// (ρ, unless kept; T'; the odd part's scaled V'); T' lies in its item's set (hi over T, in place, lo beside
// it), so the next item's T' needs no barrier. They store M and W from their accumulators in the image
// layout. Rows past a chunk's end come in as the next sequence's: ρ and β are zero there, M's mask stops at
// the chunk's end, T's identity rows past the end then give zero rows of W, as the image format wants.
// Measured (H200, ncu, 8K = 2 x 4096, HK 16, HV 32, keep states): the one pass 0.137 ms against the lean prep
// 0.093 + the odd states kernel 0.062 (PERF_NOTES session 35, gdnfw).
#include <cstdlib>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/l2norm_row.cuh"
#include "gdn/prep_wgmma.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_wgmma::desc_at;
using gdn_wgmma::desc_k;
using gdn_wgmma::desc_mn;
using gdn_wgmma::mma_steps;
using gdn_wgmma::pack;
using gdn_wgmma::sw;
constexpr int C = kGdnChunk, D = 128, NT = 256;
constexpr uint32_t kRows = C * D * 2, kSq = C * C * 2;  // bytes of a 64 x 128 and of a 64 x 64 tile

struct Smem {                                           // byte offsets
  static constexpr uint32_t Q = 0;                      // in a set: q [64][dk]
  static constexpr uint32_t K = Q + kRows;              //   k [64][dk]
  static constexpr uint32_t T = K + kRows;              //   T [64][64] (bf16, kept by the forward), then T' hi
  static constexpr uint32_t Tlo = T + kSq;              //   T' lo
  static constexpr uint32_t set = Tlo + kSq;            // [2] sets by item parity
  static constexpr uint32_t vec = 2 * set;              // [2][2][64] fp32 by parity: G, β
  static constexpr uint32_t rho = vec + 2 * 2 * C * 4;  // [2][3][64] by parity: ρ_k, ρ_q, s = β·e^G·ρ_k
  static constexpr uint32_t rec = rho + 2 * 3 * C * 4;  // int [2][8] by parity: t0, len, h, ch, odd state
  static constexpr uint32_t bar = rec + 64;             // mbarriers full[2], empty[2], V' (odd states)[2]
  static constexpr uint32_t bytes = bar + 6 * 8;        // 100,976: two blocks per SM
};
static_assert(Smem::set % 1024 == 0 && Smem::Tlo % 1024 == 0 && Smem::bar % 8 == 0,
              "tile and mbarrier alignment");
constexpr uint32_t kSetBytes = 2 * kRows + kSq;

struct LeanMaps {
  tma::ImageMap q, k, T, V;  // V: V' (the odd states, ODD)
};

// The odd chunks' states formed in the same pass (ODD; odd_states_wgmma.cu's contract and arithmetic): the
// item of an even chunk 2p (whole, as chunk 2p + 1 continues its sequence) also forms
//   S_{2p+1} = γ_last·S_{2p} + kᵀ·diag(ρ_k·e^{G_last−G})·V'
// from its k tile, ρ_k and G, with V' copied into its set's q tile once q·kᵀ is done, S_{2p} read by the pairs
// the accumulators need (prefetched to L2 at the item's start); zeros where chunk 2p + 1 starts another sequence.
struct LeanOdd {
  const int32_t* chunk_off = nullptr;
  int nseq = 0;
  const bf16* S16 = nullptr;  // the kept (even) states, chunk 2p's at slot p
  bf16* Sodd = nullptr;       // (=) the odd states, chunk 2p + 1's at slot p
};

// ρ_k, ρ_q of an item's rows lane, lane + 32 as the forward prep kept them (GdnNormOut::rho_kept), loaded by
// the producer warp one item ahead of their use like the gates.
struct RowRho {
  float k[2], q[2];
};
template <bool KEPT>
__device__ __forceinline__ RowRho load_row_rho(const GdnNormOut& nout, const int32_t* chunks, int item,
                                               int64_t HV, int64_t HK) {
  RowRho r{};
  if constexpr (!KEPT) return r;

  const int ch = item / static_cast<int>(HV), h = item % static_cast<int>(HV), lane = threadIdx.x & 31;
  const gdn_chunk::ChunkRef cr = gdn_chunk::chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = lane + 32 * rr;
    if (i < cr.len) r.k[rr] = nout.rk[(cr.t0 + i) * HK + hk], r.q[rr] = nout.rq[(cr.t0 + i) * HK + hk];
  }
  return r;
}

// KEPT: ρ kept by the forward prep (GdnNormOut::rho_kept; a template argument, so that no branch lies between
// the q·kᵀ issue and its wait). ODD (with KEPT): the odd chunks' states in the same pass (LeanOdd).
template <bool KEPT, bool ODD = false>
__global__ void __launch_bounds__(NT + 32, 2)
    gdn_lean_prep_wgmma_kernel(const __grid_constant__ LeanMaps maps, float scale, GdnNormOut nout,
                               GdnGates gates, const int32_t* chunks, int nitems, float* Gc, bf16* Wh,
                               bf16* Mh, int64_t HK, int64_t HV, LeanOdd odd) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(KEPT || !ODD, "the odd states read the kept ρ_k");
  extern __shared__ __align__(1024) unsigned char gdn_smem[];
  const uint32_t sb = mma::smem_addr(gdn_smem), full = sb + Smem::bar, empty = full + 16,
                 vbar = full + 32;  // [2] each
  const int tid = threadIdx.x, warp = tid >> 5, wq = warp & 3, lane = tid & 31;
  const int step = static_cast<int>(gridDim.x);
  if (tid == 0) {
    for (int p = 0; p < 2; ++p) {
      tma::mbar_init(full + 8 * p, 32);
      tma::mbar_init(empty + 8 * p, NT / 32);
      tma::mbar_init(vbar + 8 * p, 1);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (warp == NT / 32) {
    // Producer warp: q, k, T by TMA (lane 0), G and β of the rows lane, lane + 32 (the gates loaded one item
    // ahead), the chunk record and the Gc output; set p once the consumers released it (the item two before).
    gdn_prep::RowGates gv = gdn_prep::load_row_gates(gates, chunks, blockIdx.x, HV);
    RowRho rv = load_row_rho<KEPT>(nout, chunks, blockIdx.x, HV, HK);
    int n = 0;
    for (int idx = blockIdx.x; idx < nitems; idx += step, ++n) {
      const int p = n & 1, ch = idx / static_cast<int>(HV), h = idx % static_cast<int>(HV);
      const gdn_chunk::ChunkRef cr = gdn_chunk::chunk_at(chunks, ch);
      if (n >= 2) tma::mbar_wait(empty + 8 * p, ((n >> 1) - 1) & 1);
      if (lane == 0) {
        const uint32_t s = sb + p * Smem::set, bar = full + 8 * p;
        const int t0 = static_cast<int>(cr.t0), hk = static_cast<int>(h / (HV / HK));
        tma::mbar_expect_tx(bar, kSetBytes);
        tma::image_tile(s + Smem::Q, maps.q, t0, hk, bar);
        tma::image_tile(s + Smem::K, maps.k, t0, hk, bar);
        tma::image_tile(s + Smem::T, maps.T, (ch * static_cast<int>(HV) + h) * C, 0, bar);
        int* rec = reinterpret_cast<int*>(gdn_smem + Smem::rec) + 8 * p;
        rec[0] = t0, rec[1] = cr.len, rec[2] = h, rec[3] = ch;
        int om = 0;  // the odd state of chunk ch + 1: none, zero (another sequence starts), or formed
        if constexpr (ODD)
          if ((ch & 1) == 0 && (ch + 1) * static_cast<int>(HV) < nitems)
            om = gdn_chunk::next_chunk_continues(odd.chunk_off, odd.nseq, ch) ? 2 : 1;
        rec[4] = om;
      }
      float* G = reinterpret_cast<float*>(gdn_smem + Smem::vec) + p * 2 * C;
      float* B = G + C;
      gdn_prep::store_row_gates(G, B, gv, cr, Gc, HV, h);
      if constexpr (KEPT) {  // ρ_k, ρ_q, s = β·e^G·ρ_k of the rows lane, lane + 32 (rows_rho's arithmetic)
        float* R = reinterpret_cast<float*>(gdn_smem + Smem::rho) + p * 3 * C;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int i = lane + 32 * rr;
          const bool ok = i < cr.len;
          R[i] = ok ? rv.k[rr] : 0.f, R[C + i] = ok ? rv.q[rr] : 0.f;
          R[2 * C + i] = ok ? B[i] * expf(G[i]) * rv.k[rr] : 0.f;
        }
      }
      tma::mbar_arrive(full + 8 * p);
      if (idx + step < nitems) {  // in flight until the next fill
        gv = gdn_prep::load_row_gates(gates, chunks, idx + step, HV);
        rv = load_row_rho<KEPT>(nout, chunks, idx + step, HV, HK);
      }
    }
    return;
  }

  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform: descriptors in uniform registers
  const int g = lane >> 2, t4 = lane & 3, c32 = 32 * wg, c64 = 64 * wg;
  auto consumers_sync = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory"); };
  uint32_t vph = 0;  // ODD: bit p, the parity of vbar[p]'s next completion
  for (int idx = blockIdx.x, n = 0; idx < nitems; idx += step, ++n) {
    const int p = n & 1;
    const uint32_t S = sb + p * Smem::set;
    unsigned char* set = gdn_smem + p * Smem::set;
    const float* G = reinterpret_cast<const float*>(gdn_smem + Smem::vec) + p * 2 * C;
    const float* B = G + C;
    tma::mbar_wait(full + 8 * p, (n >> 1) & 1);
    const int* rec = reinterpret_cast<const int*>(gdn_smem + Smem::rec) + 8 * p;
    const int64_t t0 = rec[0];
    const int len = rec[1], h = rec[2], ch = rec[3];
    const int om = ODD ? __shfl_sync(0xffffffffu, rec[4], 0) : 0;  // warp-uniform (the odd part's wgmma)
    if (ODD && om == 2 && tid == 0)  // S_{2p} (chunk ch = 2p) into L2 for the odd part
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(odd.S16 + (int64_t(ch >> 1) * HV + h) * D * D),
                   "r"(D * D * 2)
                   : "memory");
    const int64_t hk = h / (HV / HK);
    float* Rk = reinterpret_cast<float*>(gdn_smem + Smem::rho) + p * 3 * C;
    float* Rq = Rk + C;
    float* Sv = Rq + C;  // β·e^G·ρ_k
    float m[16];
    wgmma::fence_operands(m);
    wgmma::fence();
    {
      // q·kᵀ on columns c32 .. c32 + 31 (k rows as the K-major B), while ρ is formed
      const uint64_t Q_k = desc_k(S + Smem::Q), Kn_k = desc_k(S + Smem::K + 1024 * wg);
      mma_steps<D / 16, 0, 0>(m, Q_k, 2048, Kn_k, 2048);
      wgmma::commit();
    }
    if constexpr (!KEPT) {
      gdn_prep::rows_rho(set + Smem::K, set + Smem::Q, scale, nout, h % (HV / HK) == 0, G, B, Rk, Rq, Sv, len,
                         t0, hk, HK);
      consumers_sync();  // ρ and s complete
    }
    // T' = T·diag(s) as bf16 hi + lo, two 16-byte pieces (8 columns of a row) per thread, in T's layout (hi
    // over the thread's own T pieces)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = tid + NT * e, r = (q & 127) >> 1, c = 16 * (q >> 7) + 8 * ((q & 1) ^ ((r >> 2) & 1));
      const uint4 t = *reinterpret_cast<const uint4*>(set + Smem::T + 16 * q);
      const uint32_t tw[4] = {t.x, t.y, t.z, t.w};
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&tw[w]));
        gdn_mma::split_bf16x2(hi[w], lo[w], x.x * Sv[c + 2 * w], x.y * Sv[c + 2 * w + 1]);
      }
      *reinterpret_cast<uint4*>(set + Smem::T + 16 * q) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(set + Smem::Tlo + 16 * q) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(m);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {  // M_ij = scale·ρ_q,i·(q·k)_ij·ρ_k,j·e^{G_i−G_j} on j ≤ i < len
      const int i = 16 * wq + g + 8 * hf;
      const float Gi = G[i], qi = scale * Rq[i];
#pragma unroll
      for (int nb = 0; nb < 4; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = c32 + 8 * nb + 2 * t4 + e, r = 4 * nb + 2 * hf + e;
          const float qk = qi * (m[r] * Rk[j]);
          m[r] = (i >= j && i < len) ? qk * expf(Gi - G[j]) : 0.f;
        }
    }
    gdn_prep::store_image(Mh + (int64_t(ch) * HV + h) * C * C, m, c32);
    wgmma::fence_proxy_async();
    consumers_sync();  // T' complete
    if (ODD && om == 2 && tid == 0) {  // every q·kᵀ is done: V' into the q tile
      tma::mbar_arrive_expect_tx(vbar + 8 * p, C * D * 2);
      tma::image_tile(S + Smem::Q, maps.V, static_cast<int>(t0), h, vbar + 8 * p);
    }
    float w[32];
    wgmma::fence_operands(w);
    wgmma::fence();
    {
      // W = T'hi·k + T'lo·k on columns c64 .. c64 + 63 (k MN-major)
      const uint64_t K_mn = desc_mn(S + Smem::K + 8192 * wg, 2048);
      mma_steps<C / 16, 0, 1>(w, desc_k(S + Smem::T), 2048, K_mn, 512);
      mma_steps<C / 16, 0, 1>(w, desc_k(S + Smem::Tlo), 2048, K_mn, 512, true);
      wgmma::commit();
    }
    wgmma::wait<0>();
    wgmma::fence_operands(w);
    __syncwarp();
    if (!(ODD && om == 2) && lane == 0) tma::mbar_arrive(empty + 8 * p);  // this warp is done with set p
    gdn_prep::store_image(Wh + (int64_t(ch) * HV + h) * C * D, w, c64);
    if constexpr (ODD) {
      const int64_t oslot = (int64_t(ch >> 1) * HV + h) * D * D;  // S_{2p}, S_{2p+1} of chunk ch = 2p
      bf16* dst = odd.Sodd + oslot;
      if (om == 1) {  // chunk ch + 1 starts another sequence: its state is zero
        uint4* so = reinterpret_cast<uint4*>(dst);
        for (int x = tid; x < D * D / 8; x += NT) so[x] = make_uint4(0u, 0u, 0u, 0u);
      } else if (om == 2) {
        tma::mbar_wait(vbar + 8 * p, (vph >> p) & 1);
        const float gl = G[C - 1], gam = expf(gl);
        {  // V' rows times ρ_k·e^{G_last − G} (bf16, in place; a thread's 4 pieces lie in one row)
          const int vr = (tid % (C * 2)) >> 1;
          const float f = Rk[vr], dc = expf(gl - G[vr]);
#pragma unroll
          for (int x = tid; x < C * D / 8; x += NT) {
            uint4* v = reinterpret_cast<uint4*>(set + Smem::Q) + x;
            *v = mma::scale_bf16x8(*v, f, dc);
          }
        }
        wgmma::fence_proxy_async();
        consumers_sync();  // the scaled V'
        // warpgroup wg: state rows 64wg .. (A = kᵀ), value columns 32nq .. (B = the scaled V'), a quarter at a
        // time (m64n32: the registers of the W product's pass); S_{2p}'s pairs as odd_states_wgmma.cu loads them
        // (even lane 2t4 .., odd lane 8 + 2(t4 − 1) ..)
        const bool lodd = t4 & 1;
        const bf16* src = odd.S16 + oslot + (64 * wg + 16 * wq + g) * D + (lodd ? 8 + 2 * (t4 - 1) : 2 * t4);
        const uint64_t A = desc_mn(S + Smem::K + 8192 * wg, 2048);
#pragma unroll
        for (int nq = 0; nq < 4; ++nq) {
          uint2 sp[2][2];
#pragma unroll
          for (int pp = 0; pp < 2; ++pp)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              sp[pp][hf] = __ldg(reinterpret_cast<const uint2*>(src + 8 * hf * D + 32 * nq + 16 * pp));
          float acc[16];
          wgmma::fence_operands(acc);
          wgmma::fence();
          const uint64_t Bv = desc_mn(S + Smem::Q + 4096 * nq, 2048);
#pragma unroll
          for (int st = 0; st < C / 16; ++st)
            wgmma::mma_m64n32<1, 1>(acc, desc_at(A, 512 * st), desc_at(Bv, 512 * st), st > 0);
          wgmma::commit();
          wgmma::wait<0>();
          wgmma::fence_operands(acc);
          if (nq == 3) {
            __syncwarp();
            if (lane == 0) tma::mbar_arrive(empty + 8 * p);  // this warp is done with set p
          }
#pragma unroll
          for (int pp = 0; pp < 2; ++pp)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const uint2 u = sp[pp][hf];
              const uint32_t r = __shfl_xor_sync(0xffffffffu, lodd ? u.x : u.y, 1);
              const uint32_t w2[2] = {lodd ? r : u.x, lodd ? u.y : r};  // n-blocks 2pp, 2pp + 1
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int nb = 2 * pp + e;
                const float2 sv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w2[e]));
                acc[4 * nb + 2 * hf] += gam * sv.x;
                acc[4 * nb + 2 * hf + 1] += gam * sv.y;
              }
            }
          gdn_mma::store_tile_bf16(dst + 64 * wg * D, D, *reinterpret_cast<const float(*)[4][4]>(&acc), 16 * wq,
                                   32 * nq, 64, 1.f);
        }
        vph ^= 1u << p;
      }
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
cudaError_t launch_gdn_lean_prep_wgmma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                       const GdnNormOut& nout, const GdnGates& gates, const int32_t* chunks,
                                       int nchunks, float* Gc, const GdnScanBf16& b16, int64_t HK, int64_t HV,
                                       int64_t T, cudaStream_t s, const GdnHalfStates* half,
                                       const void* states16, bool* odd_done) {
  if (odd_done) *odd_done = false;
  if (T <= 0 || !b16.image || !b16.W || !b16.M || !b16.T_kept || q.t != KType::BF16 || k.t != KType::BF16 ||
      nout.qn || !Gc || !pol.hopper())
    return cudaErrorNotSupported;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  LeanMaps maps{};
  if (!tma::encode_image_map(maps.q, q.p, T, HK, C, true) ||
      !tma::encode_image_map(maps.k, k.p, T, HK, C, true) ||
      !tma::encode_image_map(maps.T, b16.T_kept, int64_t(nchunks) * HV * C, 1, C, true, C, C))
    return cudaErrorNotSupported;
  // The odd chunks' states in the same pass: with ρ kept, V' mappable and S_{2p}'s pairs 8-byte aligned.
  LeanOdd odd{};
  const bool fuse = odd_done && half && half->odd && half->vnew && half->chunk_off && states16 &&
                    nout.rho_kept && half->tokens == T && reinterpret_cast<uintptr_t>(states16) % 8 == 0 &&
                    tma::encode_image_map(maps.V, half->vnew, T, HV, C, true);
  if (fuse)
    odd = LeanOdd{half->chunk_off, half->nseq, static_cast<const bf16*>(states16), static_cast<bf16*>(half->odd)};
  auto* kernel = fuse              ? gdn_lean_prep_wgmma_kernel<true, true>
                 : nout.rho_kept ? gdn_lean_prep_wgmma_kernel<true>
                                 : gdn_lean_prep_wgmma_kernel<false>;
  cudaError_t e = set_launch_smem(pol, kernel, Smem::bytes);
  if (e != cudaSuccess) return e;
  const int sms = pol.sm_count;
  const int items = nchunks * static_cast<int>(HV);
  kernel<<<std::min(items, 2 * sms), NT + 32, Smem::bytes, s>>>(maps, scale, nout, gates, chunks, items, Gc,
                                                                static_cast<bf16*>(b16.W),
                                                                static_cast<bf16*>(b16.M), HK, HV, odd);
  e = cudaGetLastError();
  if (e == cudaSuccess && fuse) *odd_done = true;
  return e;
}
#endif

}  // namespace deltatune::kernels
