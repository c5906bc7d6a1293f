// The chunked GDN forward prep for the wgmma scan (gdn_chunk_prep_mma_kernel<true>, chunk_prep_mma.cu: bf16
// q, k, v, operand images) on Hopper's warpgroup tensor cores with TMA copies (sm_90a). Per work item (chunk,
// value head), the same outputs by the same arithmetic:
//   G = cumsum(g) in the prep's order (Gc); ρ_k, ρ_q from the tiles with the L2 norm's sums in its order
//   (two threads a row: prep_rho.cuh)
//   A = diag(β·ρ_k)·(k·kᵀ)·diag(ρ_k) ⊙ e^{G_i−G_j} on i > j and M = diag(scale·ρ_q)·(q·kᵀ)·diag(ρ_k) ⊙
//   e^{G_i−G_j} on i ≥ j (one bf16 product each, m64n32 per warpgroup; A to fp32 shared memory, M as an image
//   tile) T = (I + A)^{-1} by prep_solve.cuh (diagonal blocks by substitution, the others by distance on
//   mma.sync with hi + lo operands, their sums split across the phases: prep_solve_parts.cuh), written as
//   bf16 when asked W = T·diag(β·e^G·ρ_k)·k and U = T·diag(β)·V
//   with T's factors split into bf16 hi + lo (two products each, m64n64 per warpgroup): W as an image tile, U
//   (bf16) by rows the key head's K̂ = ρ_k·k and Q̂ = scale·ρ_q·q image tiles (its first value head)
// Pipeline (a persistent grid of two blocks per SM, each two consumer warpgroups and a producer warp): q, k,
// v (32-byte swizzled tiles by TMA) and the per-row G, β in one set per block, refilled by the producer warp
// as soon as the consumers release it (mbarriers full/empty; the other block computes meanwhile), its gate
// values loaded one item ahead. Rows past a chunk's end come in as the next sequence's: ρ and β are zero
// there, A's and M's masks stop at the chunk's end, T's rows past the end are identity rows (zero rows of W
// and U, as the image format wants), and the row stores stop at the chunk's end.
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
#include "gdn/prep_rho.cuh"
#include "gdn/prep_solve.cuh"
#include "gdn/prep_solve_parts.cuh"
#include "gdn/prep_wgmma.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_prep::kLA;
using gdn_wgmma::as_frags;
using gdn_wgmma::desc_at;
using gdn_wgmma::desc_k;
using gdn_wgmma::desc_mn;
using gdn_wgmma::mma_steps;
using gdn_wgmma::pack;
using gdn_wgmma::sw;
constexpr int C = kGdnChunk, D = 128, NT = 256;
constexpr uint32_t kRows = C * D * 2, kSq = C * C * 2, kF32 = C * kLA * 4;

struct Smem {                                   // byte offsets
  static constexpr uint32_t K = 0;              // [2] k [64][dk] by item parity
  static constexpr uint32_t Q = K + 2 * kRows;  // q [64][dk]
  static constexpr uint32_t V = Q + kRows;      // v [64][dv]
  static constexpr uint32_t A = V + kRows;      // A fp32 [64][kLA]; then T' = T·diag(s) hi, lo [64][64]
  static constexpr uint32_t T = A + kF32;       // T fp32 [64][kLA]; then T'' = T·diag(β) hi, lo
  static constexpr uint32_t vec = T + kF32;     // [2][2][64] fp32 by parity: G, β
  static constexpr uint32_t rho = vec + 2 * 2 * C * 4;  // [3][64] fp32: ρ_k, ρ_q, s = β·e^G·ρ_k
  static constexpr uint32_t rec = rho + 3 * C * 4;      // int [2][4] by parity: t0, len, h, ch
  static constexpr uint32_t bar =
      rec + 32;  // mbarriers full_k[2], empty_k[2], full_q, empty_q, full_v, empty_v
  static constexpr uint32_t part = bar + 8 * 8;  // fp32 [3][256]: the solve's partial sums (prep_solve_parts.cuh)
  static constexpr uint32_t bytes = part + 3 * 256 * 4;  // 107,360: two blocks per SM
};
static_assert(Smem::A % 1024 == 0 && Smem::T % 1024 == 0 && Smem::bar % 8 == 0,
              "tile and mbarrier alignment");
static_assert(2 * kSq <= kF32, "T' (T'') hi + lo fit in A's (T's) place");

struct FwdMaps {
  tma::ImageMap q, k, v;
};

// A 16-byte global store as one instruction (ptxas splits a plain uint4 store into four 4-byte ones when it
// keeps the four words in registers that are not an aligned quad, as under this kernel's 96-register cap).
__device__ __forceinline__ void st16(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__global__ void __launch_bounds__(NT + 32, 2)
    gdn_fwd_prep_wgmma_kernel(const __grid_constant__ FwdMaps maps, float scale, GdnNormOut nout,
                              GdnGates gates, const int32_t* chunks, int nitems, float* Gc, bf16* Wh,
                              bf16* Mh, bf16* Kdh, bf16* Qh, bf16* Th, bf16* U16, int64_t HK, int64_t HV) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char gdn_smem[];
  // mbarriers: k, the row values and the chunk record by item parity (released after W); q (released once
  // M and the images are formed) and v (released after U), one each
  const uint32_t sb = mma::smem_addr(gdn_smem), full_k = sb + Smem::bar, empty_k = full_k + 16,
                 full_q = full_k + 32, empty_q = full_k + 40, full_v = full_k + 48, empty_v = full_k + 56;
  const int tid = threadIdx.x, warp = tid >> 5, wq = warp & 3, lane = tid & 31;
  const int step = static_cast<int>(gridDim.x);
  float* Rk = reinterpret_cast<float*>(gdn_smem + Smem::rho);
  float* Rq = Rk + C;
  float* Sv = Rq + C;  // β·e^G·ρ_k
  if (tid == 0) {
    for (int p = 0; p < 2; ++p) {
      tma::mbar_init(full_k + 8 * p, 32);  // the producer's lanes (and the copy's bytes)
      tma::mbar_init(empty_k + 8 * p, NT / 32);
    }
    tma::mbar_init(full_q, 1);
    tma::mbar_init(empty_q, NT / 32);
    tma::mbar_init(full_v, 1);
    tma::mbar_init(empty_v, NT / 32);
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (warp == NT / 32) {
    // Producer warp: k, q, v by TMA (lane 0) as their buffers are released, G and β of the rows lane, lane +
    // 32 (the gates loaded one item ahead), the chunk record and the Gc output.
    // On odd turns a block takes the other value head of the pair (item idx ^ 1: the block of idx ^ 1 takes
    // idx on the same turn, as the grid is even): with an even grid a block would otherwise always get the key
    // head's first value head (which also writes the K̂, Q̂ images and ρ) or never, and the SMs holding such
    // blocks would carry all of that work.
    const int swap = step % 2 == 0 && nitems % 2 == 0 && HV % 2 == 0 ? 1 : 0;
    gdn_prep::RowGates gv = gdn_prep::load_row_gates(gates, chunks, blockIdx.x, HV);
    int n = 0;
    for (int idx = blockIdx.x; idx < nitems; idx += step, ++n) {
      const int it = idx ^ (swap & n);
      const int ch = it / static_cast<int>(HV), h = it % static_cast<int>(HV);
      const gdn_chunk::ChunkRef cr = gdn_chunk::chunk_at(chunks, ch);
      const int p = n & 1, t0 = static_cast<int>(cr.t0), hk = static_cast<int>(h / (HV / HK));
      // k, G, β and the record into set p once the item two before is done with it
      if (n >= 2) tma::mbar_wait(empty_k + 8 * p, ((n >> 1) - 1) & 1);
      int* rec = reinterpret_cast<int*>(gdn_smem + Smem::rec) + 4 * p;
      float* G = reinterpret_cast<float*>(gdn_smem + Smem::vec) + p * 2 * C;
      float* B = G + C;
      if (lane == 0) {
        tma::mbar_expect_tx(full_k + 8 * p, kRows);
        tma::image_tile(sb + Smem::K + p * kRows, maps.k, t0, hk, full_k + 8 * p);
        rec[0] = t0, rec[1] = cr.len, rec[2] = h, rec[3] = ch;
      }
      gdn_prep::store_row_gates(G, B, gv, cr, Gc, HV, h);
      tma::mbar_arrive(full_k + 8 * p);
      // q once the item before has formed M and the images, v once it is done
      if (n >= 1) tma::mbar_wait(empty_q, (n - 1) & 1);
      if (lane == 0) {
        tma::mbar_arrive_expect_tx(full_q, kRows);
        tma::image_tile(sb + Smem::Q, maps.q, t0, hk, full_q);
      }
      if (n >= 1) tma::mbar_wait(empty_v, (n - 1) & 1);
      if (lane == 0) {
        tma::mbar_arrive_expect_tx(full_v, kRows);
        tma::image_tile(sb + Smem::V, maps.v, t0, h, full_v);
      }
      if (idx + step < nitems)
        gv = gdn_prep::load_row_gates(gates, chunks, (idx + step) ^ (swap & (n + 1)), HV);  // until the next fill
    }
    return;
  }

  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform: descriptors in uniform registers
  const int g = lane >> 2, t4 = lane & 3, c32 = 32 * wg, c64 = 64 * wg;
  auto consumers_sync = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory"); };
  float* Af = reinterpret_cast<float*>(gdn_smem + Smem::A);
  float* Tf = reinterpret_cast<float*>(gdn_smem + Smem::T);
  const uint64_t Q_k = desc_k(sb + Smem::Q), V_mn = desc_mn(sb + Smem::V + 8192 * wg, 2048);
  const uint64_t Th_k = desc_k(sb + Smem::A), Tl_k = desc_k(sb + Smem::A + kSq);
  const uint64_t Bh_k = desc_k(sb + Smem::T), Bl_k = desc_k(sb + Smem::T + kSq);
  for (int idx = blockIdx.x, n = 0; idx < nitems; idx += step, ++n) {
    const int p = n & 1;
    const uint32_t Kb = Smem::K + p * kRows;  // this item's k tile
    const uint64_t K_k = desc_k(sb + Kb), Kn_k = desc_k(sb + Kb + 1024 * wg),
                   K_mn = desc_mn(sb + Kb + 8192 * wg, 2048);
    const float* G = reinterpret_cast<const float*>(gdn_smem + Smem::vec) + p * 2 * C;
    const float* B = G + C;
    const int* rec = reinterpret_cast<const int*>(gdn_smem + Smem::rec) + 4 * p;
    tma::mbar_wait(full_k + 8 * p, (n >> 1) & 1);
    tma::mbar_wait(full_q, n & 1);
    const int64_t t0 = rec[0];
    const int len = rec[1], h = rec[2], ch = rec[3];
    const int64_t hk = h / (HV / HK);
    const bool first = h % (HV / HK) == 0;  // the key head's first value head writes its K̂, Q̂ (and ρ)
    float kk[16], m[16];
    wgmma::fence_operands(kk);
    wgmma::fence_operands(m);
    wgmma::fence();
    // k·kᵀ and q·kᵀ on columns c32 .. c32 + 31 (k rows as the K-major B), while ρ is formed
    mma_steps<D / 16, 0, 0>(kk, K_k, 2048, Kn_k, 2048);
    mma_steps<D / 16, 0, 0>(m, Q_k, 2048, Kn_k, 2048);
    wgmma::commit();
    gdn_prep::rows_rho_pairs(gdn_smem + Kb, gdn_smem + Smem::Q, nout, first, G, B, Rk, Rq, Sv, len, t0, hk, HK);
    consumers_sync();  // ρ and s complete
    wgmma::wait<0>();
    wgmma::fence_operands(kk);
    wgmma::fence_operands(m);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      // A_ij = β_i·ρ_k,i·(k·k)_ij·ρ_k,j·e^{G_i−G_j} on j < i < len; M_ij likewise with scale·ρ_q,i on j ≤ i
      const int i = 16 * wq + g + 8 * hf;
      const float Gi = G[i], bi = B[i] * Rk[i], qi = scale * Rq[i];
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = c32 + 8 * nb + 2 * t4 + e, r = 4 * nb + 2 * hf + e;
          const float dec = i >= j && i < len ? expf(Gi - G[j]) : 0.f;
          x[e] = i > j ? bi * (kk[r] * Rk[j]) * dec : 0.f;
          m[r] = qi * (m[r] * Rk[j]) * dec;
        }
        *reinterpret_cast<float2*>(Af + i * kLA + c32 + 8 * nb + 2 * t4) = make_float2(x[0], x[1]);
      }
    }
    gdn_prep::store_image(Mh + (int64_t(ch) * HV + h) * C * C, m, c32);
    consumers_sync();                                      // A complete
    if (warp < 4 && lane == 0) tma::mbar_arrive(empty_q);  // these warps are done with q
    if (warp < 4) {
      gdn_prep::diagonal_t(Af, Tf, 16 * warp, len);
    } else if (first && Kdh) {  // meanwhile the key head's K̂, Q̂ image tiles: 8 row pieces of 8 columns each
      bf16* kd = Kdh + (int64_t(ch) * HK + hk) * C * D;
      bf16* qd = Qh ? Qh + (int64_t(ch) * HK + hk) * C * D : nullptr;
#pragma unroll 4
      for (int e = 0; e < C * D / 8 / (NT / 2); ++e) {
        const int pc = tid - NT / 2 + NT / 2 * e, r = pc % C, c = 8 * (pc / C);
        const uint32_t at = sw<C>(r, c);
        const int64_t o = gdn_scan_image_index(r, c);
        st16(kd + o, mma::scale_bf16x8(*reinterpret_cast<const uint4*>(gdn_smem + Kb + at), 1.f, Rk[r]));
        if (qd)
          st16(qd + o, mma::scale_bf16x8(*reinterpret_cast<const uint4*>(gdn_smem + Smem::Q + at), scale, Rq[r]));
      }
    }
    if (warp >= 4) {
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty_q);
    }
    consumers_sync();  // the diagonal blocks of T
    // the off-diagonal blocks by distance, the sums over m split across the phases (prep_solve_parts.cuh)
    gdn_prep::off_diagonal_phases(Af, Tf, reinterpret_cast<float*>(gdn_smem + Smem::part), warp, len,
                                  consumers_sync);
    uint32_t bh[2][4], bl[2][4];  // T'' hi, lo of the thread's pieces
    {
      // T (bf16, zeros above the diagonal blocks), T' = T·diag(s) and T'' = T·diag(β) as bf16 hi + lo in
      // swizzled tiles (T' over A, T'' over T once T is read): two 8-column row pieces per thread
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = tid + NT * e, r = q >> 3, c = 8 * (q & 7);
        float t[8];
        const bool on = (c >> 4) <= (r >> 4);  // the upper blocks hold the solve's scratch
#pragma unroll
        for (int w = 0; w < 8; w += 4) {
          const float4 y =
              on ? *reinterpret_cast<const float4*>(Tf + r * kLA + c + w) : make_float4(0.f, 0.f, 0.f, 0.f);
          t[w] = y.x, t[w + 1] = y.y, t[w + 2] = y.z, t[w + 3] = y.w;
        }
        uint32_t ph[4], pl[4], th[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const int j = c + 2 * w;
          gdn_mma::split_bf16x2(ph[w], pl[w], t[2 * w] * Sv[j], t[2 * w + 1] * Sv[j + 1]);
          gdn_mma::split_bf16x2(bh[e][w], bl[e][w], t[2 * w] * B[j], t[2 * w + 1] * B[j + 1]);
          th[w] = pack(t[2 * w], t[2 * w + 1]);
        }
        if (Th) st16(Th + (int64_t(ch) * HV + h) * C * C + r * C + c, make_uint4(th[0], th[1], th[2], th[3]));
        const uint32_t at = sw<C>(r, c);
        *reinterpret_cast<uint4*>(gdn_smem + Smem::A + at) = make_uint4(ph[0], ph[1], ph[2], ph[3]);
        *reinterpret_cast<uint4*>(gdn_smem + Smem::A + kSq + at) = make_uint4(pl[0], pl[1], pl[2], pl[3]);
      }
    }
    consumers_sync();  // every read of T is done: T'' goes over it
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = tid + NT * e;
      const uint32_t at = sw<C>(q >> 3, 8 * (q & 7));
      *reinterpret_cast<uint4*>(gdn_smem + Smem::T + at) = make_uint4(bh[e][0], bh[e][1], bh[e][2], bh[e][3]);
      *reinterpret_cast<uint4*>(gdn_smem + Smem::T + kSq + at) =
          make_uint4(bl[e][0], bl[e][1], bl[e][2], bl[e][3]);
    }
    wgmma::fence_proxy_async();
    consumers_sync();  // T', T'' complete
    {
      // W = T'·k, then U = T''·V, on columns c64 .. c64 + 63 (k, V MN-major; one accumulator tile at a time)
      float w[32];
      wgmma::fence_operands(w);
      wgmma::fence();
      mma_steps<C / 16, 0, 1>(w, Th_k, 2048, K_mn, 512);
      mma_steps<C / 16, 0, 1>(w, Tl_k, 2048, K_mn, 512, true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(w);
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty_k + 8 * p);  // this warp is done with k (and the row values)
      gdn_prep::store_image(Wh + (int64_t(ch) * HV + h) * C * D, w, c64);
    }
    tma::mbar_wait(full_v, n & 1);
    float u[32];
    wgmma::fence_operands(u);
    wgmma::fence();
    mma_steps<C / 16, 0, 1>(u, Bh_k, 2048, V_mn, 512);
    mma_steps<C / 16, 0, 1>(u, Bl_k, 2048, V_mn, 512, true);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(u);
    __syncwarp();
    if (lane == 0) tma::mbar_arrive(empty_v);  // this warp is done with v
    gdn_mma::store_tile_bf16(U16 + (t0 * HV + h) * D, HV * D, as_frags(u), 16 * wq, c64, len, 1.f);
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
cudaError_t launch_gdn_fwd_prep_wgmma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                      const GdnNormOut& nout, KIn v, const GdnGates& gates,
                                      const int32_t* chunks, int nchunks, float* Gc, const GdnScanBf16& b16,
                                      int64_t HK, int64_t HV, int64_t T, cudaStream_t s) {
  if (T <= 0 || !b16.image || !b16.W || !b16.M || !b16.Kd || !b16.U || b16.T_kept || q.t != KType::BF16 ||
      k.t != KType::BF16 || v.t != KType::BF16 || nout.qn || !Gc || !pol.hopper())
    return cudaErrorNotSupported;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  FwdMaps maps{};
  if (!tma::encode_image_map(maps.q, q.p, T, HK, C, true) ||
      !tma::encode_image_map(maps.k, k.p, T, HK, C, true) ||
      !tma::encode_image_map(maps.v, v.p, T, HV, C, true))
    return cudaErrorNotSupported;
  cudaError_t e = set_launch_smem(pol, gdn_fwd_prep_wgmma_kernel, Smem::bytes);
  if (e != cudaSuccess) return e;
  const int sms = pol.sm_count;
  const int items = nchunks * static_cast<int>(HV);
  gdn_fwd_prep_wgmma_kernel<<<std::min(items, 2 * sms), NT + 32, Smem::bytes, s>>>(
      maps, scale, nout, gates, chunks, items, Gc, static_cast<bf16*>(b16.W), static_cast<bf16*>(b16.M),
      static_cast<bf16*>(b16.Kd), static_cast<bf16*>(b16.Q), static_cast<bf16*>(b16.T),
      static_cast<bf16*>(b16.U), HK, HV);
  return cudaGetLastError();
}
#endif

}  // namespace deltatune::kernels
