// The chunked GDN backward's reverse state scan on Hopper's warpgroup tensor cores (wgmma, sm_90a): the
// contract of gdn_chunk_dscan_mma_kernel<64, ...> (chunk_dscan_mma.cu) for bf16 dO, q and k (with ρ), reading
// the backward prep's W and M as operand images (GdnScanBf16::image; or a checkpointed layer's recompute's,
// written by its forward prep) and q, k as they are. One block of two warpgroups per (sequence, value head,
// 64 value columns; 32 or 128 by the launcher below), chunks in reverse, dS (128 x 64, fp32) in the
// accumulators (warpgroup g: rows 64g ..). Per chunk, dS = the gradient at its end:
//   dh = bf16(dS) (from the dS tile, 16-byte row pieces)
//   [c] both warpgroups, 32 columns each: dV' = diag(ρ_k,i·e^{G_last−G_i})·(k·dS) + Mᵀ·dO  (8 + 4 wgmma
//   m64n32)
//       −dV' into a tile; dvn = bf16(dV'); diag(scale·ρ_q,i·γ_i)·dO into a tile
//   [e] both, on their 64 dS rows: dS = Γ·dS + qᵀ·(scale·ρ_q·γ∘dO) + Wᵀ·(−dV')          (4 + 4 wgmma m64n64)
//       bf16(dS) into the dS tile for the next chunk
// K̂ = diag(ρ_k)·k and Q̂ = scale·diag(ρ_q)·q, so their row factors (with the decays: Kd·dS, Qgᵀ·dO) go onto
// dS's product and dO: q and k are the wgmma operands as given (exact in bf16), read once per key head. Two
// block barriers per chunk. Three sets of a chunk's tiles at 64 columns: the tiles of the chunk two steps
// ahead are issued behind this chunk's [c] products, so each load has two chunk steps to land (H200, ncu, 8K
// = 2 x 4096, HK 16, HV 32: 0.224 -> 0.199 ms against two sets and one step ahead). Every wgmma operand is an
// MN-major or K-major no-swizzle core-matrix tile (common/wgmma.cuh, gdn_scan_image_index). Numerics: bf16
// operands and fp32 accumulation as the mma.sync kernel without its lo halves (kLoS, kLoV false), q and k
// unrounded (the mma.sync kernel rounds Qg and Kd to bf16 after their row factors).
#include <cstdlib>
#include <type_traits>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/gdn.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_wgmma::pack;
using gdn_wgmma::quad_piece;
using gdn_wgmma::store_acc;
constexpr int C = kGdnChunk;
constexpr int DK = 128, DV = 128, NT = 256;
constexpr uint32_t kCG = C * 16;  // an image's column groups are 1024 bytes apart, its 8-row groups 128

// Shared memory of a block of BV value columns (32, 64 or 128), byte offsets.
template <int BV>
struct Smem {
  // One set of a chunk's tiles (image layout):
  static constexpr uint32_t W = 0;               // [64 rows][dk]
  static constexpr uint32_t Q = W + C * DK * 2;  // [64 rows][dk] q (key head)
  static constexpr uint32_t K = Q + C * DK * 2;  // [64 rows][dk] k (key head)
  static constexpr uint32_t M = K + C * DK * 2;  // [64 rows j][64 columns i] M_ji
  static constexpr uint32_t O = M + C * C * 2;   // [64 rows][BV columns c0 ..] dO
  static constexpr uint32_t G = O + C * BV * 2;  // fp32 [64] G, then ρ_q, ρ_k [64] each
  static constexpr uint32_t set = G + 3 * C * 4;
  // Sets in flight: three at BV 32, 64 (the tiles issued two chunks ahead), two at BV 128 (one ahead).
  static constexpr int kSets = BV == 128 ? 2 : 3;
  static constexpr uint32_t Ds = kSets * set;     // dS: [dk][BV columns], 8-row groups BV·16 apart, column
                                                  // groups 128
  static constexpr uint32_t Dv = Ds + DK * BV * 2;  // −dV': image layout [64 rows][BV columns]
  static constexpr uint32_t Go = Dv + C * BV * 2;   // γ∘dO: image layout
  static constexpr uint32_t bar = Go + C * BV * 2;  // one mbarrier a set: its W, M images (and TMA tiles)
  // with the producer warp (kProducer below) one more a set: the consumers are done with it
  static constexpr size_t bytes = bar + 16 * kSets;  // BV 32: 199,984 B; 64: 231,728; 128: 214,560 (one a SM)
  static_assert(bytes <= 232448, "within Hopper's shared memory per block");
  static_assert(set % 128 == 0, "tiles stay 128-byte aligned");
};

// cp.async of rows [0, 64) x dk bf16 (row r at src + r·stride) into an image-layout tile; rows ≥ len zeros.
// Through L1 (.ca): a 32-byte sector's two 16-byte pieces land apart in the tile and are copied by different
// quarter warps, so the second one finds the sector in L1 instead of fetching it from L2 again.
__device__ __forceinline__ void cp_rows_image(uint32_t dst, const bf16* src, int64_t stride, int len) {
#pragma unroll
  for (int e = 0; e < C * DK / 8 / NT; ++e) {
    int r, cg;
    quad_piece<DK / 8>(threadIdx.x + NT * e, r, cg);
    const bool ok = r < len;
    mma::cp_async16_ca(dst + cg * kCG + r * 16, ok ? src + r * stride + 8 * cg : src, ok);
  }
}

// The TMA variant's maps (common/tma.cuh): q, k rows (image tiles), dO rows' 64-column tiles.
struct DscanMaps {
  tma::ImageMap q, k, dO;
};

// With TMA at 32 columns (the 2b row's reverse scan) a ninth warp (the producer) issues every chunk's copies
// and loads its G, ρ rows, so that no consumer warp does between [c] and the barrier after it (H200, ncu, 1 x
// 4096 at HK = HV = 16, keep all: 122.5 -> 117.0 us). At 64 columns (8K) the same was slower (196.5 ->
// 202.5 us, docs/perf/PERF_NOTES.md session 35); at 128 the consumers' 255 registers leave no room for it
// (288 threads: 168 a thread).
template <int BV, bool TMA>
constexpr bool kProducer = TMA && BV == 32;

template <int BV, bool TMA>
__global__ void __launch_bounds__(kProducer<BV, TMA> ? NT + 32 : NT, 1)
    gdn_chunk_dscan_wgmma_kernel(const __grid_constant__ DscanMaps maps, const bf16* dout, const bf16* Wi, const bf16* Mi, const bf16* q,
                                 const bf16* k, const float* rq, const float* rk, float scale,
                                 const float* Gc, const int32_t* chunks, const int32_t* chunk_off, bf16* dh,
                                 bf16* dvn, int64_t HK, int64_t HV) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Set = Smem<BV>;
  constexpr int kSets = Set::kSets, PD = kSets - 1;  // PD: chunks ahead that a set's tiles are issued
  constexpr uint32_t kDs = Set::Ds, kDv = Set::Dv, kGo = Set::Go, kBar = Set::bar;
  constexpr int HB = BV / 2, NJ = BV / 16;  // a warpgroup's columns in [c]; its n-blocks of 8 there
  extern __shared__ __align__(128) unsigned char gdn_smem[];
  const uint32_t sbase = mma::smem_addr(gdn_smem);
  const int n = blockIdx.x / HV, h = blockIdx.x % HV, c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int wg = threadIdx.x >> 7, wq = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int gr = lane >> 2, tq = lane & 3;
  const int cb = chunk_off[n], last = chunk_off[n + 1] - 1;
  if (last < cb) return;
  constexpr bool PROD = kProducer<BV, TMA>;
  const uint32_t full = sbase + kBar, empty = full + 8 * kSets;  // [kSets] each

  auto load = [&](int ch, int64_t t0, int len, int b) {  // chunk ch's tiles into set b
    const uint32_t set = sbase + b * Set::set;
    if (threadIdx.x < 3 * C) {  // G, ρ_q, ρ_k
      const int i = threadIdx.x % C, w = threadIdx.x / C;
      const bool ok = i < len;
      const float* src = w == 0 ? Gc + (t0 + i) * HV + h : (w == 1 ? rq : rk) + (t0 + i) * HK + hk;
      mma::cp_async4(set + Set::G + 4 * threadIdx.x, ok ? src : Gc, ok);
    }
    const int64_t vt = static_cast<int64_t>(ch) * HV + h;
    if (threadIdx.x == 0) {  // the W and M images: one bulk copy each (contiguous), on the set's mbarrier
      const uint32_t bar = sbase + kBar + 8 * b;
      wgmma::fence_proxy_async();  // the set's last generic reads before the copies' writes
      tma::mbar_arrive_expect_tx(bar, C * DK * 2 + C * C * 2 + (TMA ? 2 * C * DK * 2 + C * BV * 2 : 0));
      tma::bulk_copy(set + Set::W, Wi + vt * C * DK, C * DK * 2, bar);
      tma::bulk_copy(set + Set::M, Mi + vt * C * C, C * C * 2, bar);
      if (TMA) {  // q, k, dO rows as image tiles; rows past the chunk's end are the next sequence's (or zeros
                  // past the tensor's end): M, W and the row factors (ρ, γ, 0 past the end) mask them
        tma::image_tile(set + Set::Q, maps.q, static_cast<int>(t0), static_cast<int>(hk), bar);
        tma::image_tile(set + Set::K, maps.k, static_cast<int>(t0), static_cast<int>(hk), bar);
        tma::image_tile(set + Set::O, maps.dO, static_cast<int>(t0), h, bar, c0);
      }
    }
    if (!TMA) {
      cp_rows_image(set + Set::Q, q + (t0 * HK + hk) * DK, HK * DK, len);
      cp_rows_image(set + Set::K, k + (t0 * HK + hk) * DK, HK * DK, len);
#pragma unroll
      for (int e = 0; e < C * BV / 8 / NT; ++e) {  // dO rows into the image layout, zeros past the chunk's end
        int r, cg;
        quad_piece<BV / 8>(threadIdx.x + NT * e, r, cg);
        const bool ok = r < len;
        mma::cp_async16(set + Set::O + cg * kCG + r * 16,
                        ok ? dout + ((t0 + r) * HV + h) * DV + c0 + 8 * cg : dout, ok);
      }
    }
    mma::cp_async_commit();
  };

  // dS: rows 64·wg + 16·wq + gr (+8), columns 8j + 2tq (+1) (the accumulator layout), in 64-column halves.
  constexpr int DX = BV >= 64 ? BV / 64 : 1, DN = BV >= 64 ? 64 : BV;  // dS halves of DN columns
  float ds[DX][DN / 2], a1[HB / 2], a2[HB / 2];
#pragma unroll
  for (int x = 0; x < DX; ++x)
#pragma unroll
    for (int i = 0; i < DN / 2; ++i) ds[x][i] = 0.f;
#pragma unroll
  for (int i = 0; i < HB / 2; ++i) a1[i] = a2[i] = 0.f;
  for (int i = threadIdx.x; i < DK * BV / 8; i += NT)
    reinterpret_cast<uint4*>(gdn_smem + kDs)[i] = make_uint4(0u, 0u, 0u, 0u);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < kSets; ++b) {
      tma::mbar_init(full + 8 * b, PROD ? 32 : 1);  // the producer's lanes (and the copies' bytes)
      if (PROD) tma::mbar_init(empty + 8 * b, 1);   // one consumer thread
    }
    tma::fence_barrier_init();
  }
  __syncthreads();
  if constexpr (PROD) {
    if (threadIdx.x >= NT) {
      // Producer warp: chunk step s's tiles (by TMA, lane 0) and G, ρ_q, ρ_k rows (6 a lane, zeros past the
      // chunk's end; loaded before the wait) into set s % kSets once step s − kSets is done with it.
      for (int s = 0, ch = last; ch >= cb; --ch, ++s) {
        const int b = s % kSets;
        const int64_t t0 = chunks[2 * ch];
        const int len = chunks[2 * ch + 1];
        float v[3 * C / 32];
#pragma unroll
        for (int x = 0; x < 3 * C / 32; ++x) {
          const int idx = lane + 32 * x, i = idx % C, w = idx / C;
          v[x] = i < len ? (w == 0 ? Gc[(t0 + i) * HV + h] : (w == 1 ? rq : rk)[(t0 + i) * HK + hk]) : 0.f;
        }
        if (s >= kSets) tma::mbar_wait(empty + 8 * b, (s / kSets - 1) & 1);
        const uint32_t set = sbase + b * Set::set, bar = full + 8 * b;
        float* gs = reinterpret_cast<float*>(gdn_smem + b * Set::set + Set::G);
#pragma unroll
        for (int x = 0; x < 3 * C / 32; ++x) gs[lane + 32 * x] = v[x];
        if (lane == 0) {
          const int64_t vt = static_cast<int64_t>(ch) * HV + h;
          tma::mbar_arrive_expect_tx(bar, C * DK * 2 + C * C * 2 + 2 * C * DK * 2 + C * BV * 2);
          tma::bulk_copy(set + Set::W, Wi + vt * C * DK, C * DK * 2, bar);
          tma::bulk_copy(set + Set::M, Mi + vt * C * C, C * C * 2, bar);
          tma::image_tile(set + Set::Q, maps.q, static_cast<int>(t0), static_cast<int>(hk), bar);
          tma::image_tile(set + Set::K, maps.k, static_cast<int>(t0), static_cast<int>(hk), bar);
          tma::image_tile(set + Set::O, maps.dO, static_cast<int>(t0), h, bar, c0);
        } else {
          tma::mbar_arrive(bar);
        }
      }
      return;
    }
  }
  // The consumer warpgroups' barrier (named barrier 1: the producer warp never joins).
  auto consumers_sync = [] {
    if constexpr (PROD)
      asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory");
    else
      __syncthreads();
  };
  // rt, rl[i]: the record (first token, length) of chunk ch − i, read one step before its tiles are issued.
  // Every step commits one cp.async group (empty past the sequence's first chunk), so waiting for all but
  // the PD − 1 newest groups completes the current chunk's.
  int64_t rt[PD + 2];
  int rl[PD + 2];
#pragma unroll
  for (int i = 0; i < PD + 2; ++i) rt[i] = 0, rl[i] = 0;
#pragma unroll
  for (int i = 0; i <= PD; ++i)
    if (last - i >= cb) rt[i] = chunks[2 * (last - i)], rl[i] = chunks[2 * (last - i) + 1];
  if constexpr (!PROD) {
#pragma unroll
    for (int i = 0; i < PD; ++i) {
      if (last - i >= cb)
        load(last - i, rt[i], rl[i], i);
      else
        mma::cp_async_commit();
    }
  }

  for (int ch = last; ch >= cb; --ch) {
    if (ch - PD - 1 >= cb) rt[PD + 1] = chunks[2 * (ch - PD - 1)], rl[PD + 1] = chunks[2 * (ch - PD - 1) + 1];
    const int64_t t0 = rt[0];
    const int len = rl[0];
    const int step = last - ch, b = step % kSets;
    if constexpr (!PROD) mma::cp_async_wait<PD - 1>();
    tma::mbar_wait(full + 8 * b, (step / kSets) & 1);
    wgmma::fence_proxy_async();
    consumers_sync();  // set b landed; the dS tile holds bf16(dS); the last chunk is done with its set
    if (PROD && threadIdx.x == 0 && step > 0) tma::mbar_arrive(empty + 8 * ((step - 1) % kSets));
    const uint32_t set = sbase + b * Set::set;
    const unsigned char* setp = gdn_smem + b * Set::set;
    const float* Gt = reinterpret_cast<const float*>(setp + Set::G);
    const float *Rq = Gt + C, *Rk = Gt + 2 * C;

    // [c] a2 = k·dS, a1 = Mᵀ·dO on this warpgroup's BV / 2 columns (HB·wg ..).
    wgmma::fence_operands(a1);
    wgmma::fence_operands(a2);
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < DK / 16; ++j)  // dS MN-major: a k step is two row groups (2 x BV·16 bytes)
      wgmma::mma_m64n<0, 1>(a2, wgmma::desc(set + Set::K + 2 * kCG * j, kCG, 128),
                            wgmma::desc(sbase + kDs + 2 * BV * 16 * j + NJ * 128 * wg, BV * 16, 128), j > 0);
#pragma unroll
    for (int j = 0; j < C / 16; ++j)  // Mᵀ and dO MN-major (image rows are their k)
      wgmma::mma_m64n<1, 1>(a1, wgmma::desc(set + Set::M + 256 * j, 128, kCG),
                            wgmma::desc(set + Set::O + NJ * kCG * wg + 256 * j, 128, kCG), j > 0);
    wgmma::commit();
    if constexpr (!PROD) {
      if (ch - PD >= cb)  // into the set chunk ch + 1 used
        load(ch - PD, rt[PD], rl[PD], (step + PD) % kSets);
      else
        mma::cp_async_commit();
    }
    {  // dh = bf16(dS at the chunk's end), 16-byte row pieces of the dS tile
      bf16* dhp = dh + (static_cast<int64_t>(ch) * HV + h) * DK * DV + c0;
#pragma unroll
      for (int e = 0; e < DK * BV / 8 / NT; ++e) {
        int r, cg;
        quad_piece<BV / 8>(threadIdx.x + NT * e, r, cg);
        *reinterpret_cast<uint4*>(dhp + r * DV + 8 * cg) =
            *reinterpret_cast<const uint4*>(gdn_smem + kDs + (r >> 3) * (BV * 16) + cg * 128 + (r & 7) * 16);
      }
    }
#pragma unroll
    for (int e = 0; e < C * BV / 8 / NT; ++e) {  // scale·ρ_q,i·γ_i·dO (γ_i = e^{G_i}, 0 past the chunk's end)
      const int p = threadIdx.x + NT * e, i = p & 63, cg = p >> 6;
      const float gam = i < len ? scale * Rq[i] * expf(Gt[i]) : 0.f;
      const uint4 x = *reinterpret_cast<const uint4*>(setp + Set::O + cg * kCG + i * 16);
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
      uint32_t y[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xs[q]));
        y[q] = pack(gam * f.x, gam * f.y);
      }
      *reinterpret_cast<uint4*>(gdn_smem + kGo + cg * kCG + i * 16) = make_uint4(y[0], y[1], y[2], y[3]);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(a1);
    wgmma::fence_operands(a2);
    {  // dV' = ρ_k,i·e^{G_last−G_i}·(k·dS) + Mᵀ·dO (rows past the end: 0); −dV' into its tile, dvn
      const float gl = Gt[len - 1];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = 16 * wq + gr + 8 * hf;
        const float dc = i < len ? Rk[i] * expf(gl - Gt[i]) : 0.f;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const float x0 = dc * a2[4 * j + 2 * hf] + a1[4 * j + 2 * hf];
          const float x1 = dc * a2[4 * j + 2 * hf + 1] + a1[4 * j + 2 * hf + 1];
          if (i < len)
            *reinterpret_cast<uint32_t*>(dvn + ((t0 + i) * HV + h) * DV + c0 + HB * wg + 8 * j + 2 * tq) =
                pack(x0, x1);
          a2[4 * j + 2 * hf] = -x0, a2[4 * j + 2 * hf + 1] = -x1;
        }
      }
      store_acc<false>(sbase + kDv + NJ * wg * kCG, 128, kCG, 16, 0, a2);  // image layout: rows 16 bytes
                                                                          // apart
    }
    wgmma::fence_proxy_async();
    consumers_sync();  // −dV' and γ∘dO complete

    // [e] dS = Γ·dS + qᵀ·(scale·ρ_q·γ∘dO) + Wᵀ·(−dV') on this warpgroup's dk rows (qᵀ, Wᵀ MN-major).
    const float gam_l = expf(Gt[len - 1]);
#pragma unroll
    for (int x = 0; x < DX; ++x) {
#pragma unroll
      for (int i = 0; i < DN / 2; ++i) ds[x][i] *= gam_l;
      wgmma::fence_operands(ds[x]);
    }
    wgmma::fence();
#pragma unroll
    for (int x = 0; x < DX; ++x) {  // columns 64x .. (8 column groups of the B images further)
#pragma unroll
      for (int j = 0; j < C / 16; ++j)
        wgmma::mma_m64n<1, 1>(ds[x], wgmma::desc(set + Set::Q + 8 * kCG * wg + 256 * j, 128, kCG),
                              wgmma::desc(sbase + kGo + 8 * kCG * x + 256 * j, 128, kCG), true);
#pragma unroll
      for (int j = 0; j < C / 16; ++j)
        wgmma::mma_m64n<1, 1>(ds[x], wgmma::desc(set + Set::W + 8 * kCG * wg + 256 * j, 128, kCG),
                              wgmma::desc(sbase + kDv + 8 * kCG * x + 256 * j, 128, kCG), true);
    }
    wgmma::commit();
    wgmma::wait<0>();
    // bf16(dS) into the dS tile (rows = dk) for the next chunk; [c]'s reads of it completed before the
    // barrier.
#pragma unroll
    for (int x = 0; x < DX; ++x) {
      wgmma::fence_operands(ds[x]);
      store_acc<false>(sbase + kDs + 8 * 128 * x, BV * 16, 128, 16, 64 * wg, ds[x]);
    }
#pragma unroll
    for (int i = 0; i < PD + 1; ++i) rt[i] = rt[i + 1], rl[i] = rl[i + 1];
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
bool gdn_dscan_wgmma_selected(const KernelPolicy& pol, int64_t pairs, int dv) {
  // The mma.sync kernel's 64-column choice (dscan_mma_tile_cols): more pairs than a wave of 32-column tiles.
  return pol.hopper() && dv == DV && pairs * (DV / 32) > pol.sm_count;
}

cudaError_t launch_gdn_chunk_dscan_wgmma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const void* W16,
                                         const void* M16, const float* Gc, const int32_t* chunks,
                                         const int32_t* chunk_off, int nseq, void* dh16, void* dvn16,
                                         int64_t HK, int64_t HV, cudaStream_t s, int64_t T) {
  if (!pol.hopper() || dout.t != KType::BF16 || gdn_qk_kind(qk) != 1 || !W16 || !M16)
    return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  // TMA for sequences of 8+ chunks on average: whole 64-row boxes also for a sequence's partial last chunk
  // (cp.async reads only its rows), and a scan of two chunks has nothing to overlap. H200, reverse scan:
  // 2 x 4096 tokens 0.229 -> 0.224 ms, 82 x 100 tokens 0.326 -> 0.359 ms with TMA.
  // 128 columns a block (W, M, q, k of a chunk read once per value head instead of twice) when 64-column
  // blocks would need more than one wave (H200, ncu, 16K = 4 x 4096, HV 32: reverse scan 0.402 -> 0.292 ms,
  // GDN kernel sum 2.336 -> 2.233); at 8K (64 pairs) 64 columns with three sets: 0.194-0.199 ms against
  // 0.250. 32 columns where 64-column blocks would leave more than half the SMs idle (operand images of a
  // recompute's forward prep: 1 x 4096 at HV 16 / 32).
  const int64_t pairs = int64_t(nseq) * HV;
  const int bv = pairs * 2 > pol.sm_count ? 128 : pairs * 4 > pol.sm_count ? 64 : 32;
  auto run = [&](auto bv_c) {
    constexpr int BV = decltype(bv_c)::value;
    DscanMaps maps{};
    const bool use_tma = T >= int64_t(nseq) * 8 * C && tma::encode_image_map(maps.q, qk.q.p, T, HK, C) &&
                         tma::encode_image_map(maps.k, qk.k.p, T, HK, C) &&
                         tma::encode_image_map(maps.dO, dout.p, T, HV, C, false, BV);
    auto* kern = use_tma ? gdn_chunk_dscan_wgmma_kernel<BV, true> : gdn_chunk_dscan_wgmma_kernel<BV, false>;
    constexpr size_t smem = Smem<BV>::bytes;
    cudaError_t e = set_launch_smem(pol, kern, smem);
    if (e != cudaSuccess) return e;
    const int threads = kProducer<BV, true> && use_tma ? NT + 32 : NT;
    kern<<<dim3(static_cast<unsigned>(nseq * HV), DV / BV), threads, smem, s>>>(
        maps, static_cast<const bf16*>(dout.p), static_cast<const bf16*>(W16), static_cast<const bf16*>(M16),
        static_cast<const bf16*>(qk.q.p), static_cast<const bf16*>(qk.k.p), qk.rq, qk.rk, qk.scale, Gc, chunks,
        chunk_off, static_cast<bf16*>(dh16), static_cast<bf16*>(dvn16), HK, HV);
    return cudaGetLastError();
  };
  return bv == 128  ? run(std::integral_constant<int, 128>{})
         : bv == 64 ? run(std::integral_constant<int, 64>{})
                    : run(std::integral_constant<int, 32>{});
}
#endif

}  // namespace deltatune::kernels
