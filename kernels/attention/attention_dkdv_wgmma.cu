// The dK/dV kernel of the attention backward on Hopper's warpgroup tensor cores (wgmma, sm_90a) at head_dim 256:
// attention_dkdv_mma_kernel's contract (attention_bwd_mma.cu: dv_j = Σ_i p_ij·do_i, dk_j = scale·Σ_i ds_ij·q_i),
// run by launch_attention_bwd_mma under the Hopper policy when the query heads of a kv head come in pairs
// (nH / nKV even).
// One block of two warpgroups per (pair of query heads of one kv head, 64-key tile) walks the 64-query tiles of
// both heads (from the diagonal on when causal; steps alternate between the heads) and accumulates both into
// the same dK and dV. dK and dV of 64 keys x 256 dims are 256 fp32 registers a thread for one warpgroup, so the
// warpgroups split the work by output, each owning one whole 64 x 256 accumulator (128 registers):
//   warpgroup 0: Sᵀ = K·Qᵀ (16 wgmma m64n64k16, both from shared memory), Pᵀ (masked, exponentiated),
//                dV += Pᵀ·dO;
//   warpgroup 1: dPᵀ = V·dOᵀ, Pᵀ (fp32) from warpgroup 0 through shared memory, dSᵀ = Pᵀ∘(dPᵀ − D),
//                dK += dSᵀ·Q.
// Pᵀ and dSᵀ go from the accumulators straight into register-A operands (attn_wgmma::score_product_n256: 4
// wgmma m64n256k16, dO / Q read MN-major), so neither makes a bf16 trip through shared memory (a split of the
// head dims would: each warpgroup needs all 64 queries of Pᵀ and dSᵀ). Warpgroup 1 issues dPᵀ once warpgroup
// 0's Sᵀ is done (named barrier 1), so the exponentials overlap the dPᵀ product; Pᵀ is handed over by named
// barrier 2.
// Shared memory (no-swizzle core layout): K, V (64 x 256 bf16 each), two stages of (Q, dO) tiles (the next
// step's tiles are issued by cp.async while the first product runs), Pᵀ in fp32 (16 KiB) and two stages of the
// query tile's lse and D: 209 KiB, one block per SM.
// Outputs: dk / dv directly when the pair is the whole kv group (nH / nKV == 2), else F32 partials per head
// pair (2, T, nH / 2, HD) that the kv head's last pair to finish the key tile sums into dk / dv (a counter per
// (key tile, kv head); this replaced two group-sum launches, 2 x 0.018 ms a 2b layer).
// MC (Hopper policy): blocks 2m and 2m+1 of the tile list form a cluster; when their key tiles lie in the same
// sequence (the host's list pairs a sequence's tiles: attention_tile_list.h) both walk the same query tiles (causal: from the
// earlier key tile on, the later one skipping the steps wholly above its diagonal) and each Q / dO tile comes
// by TMA multicast, rank 0 copying Q and rank 1 dO into both blocks (attn_wgmma image layout). Otherwise each
// block copies its own tiles by TMA. The stages' mbarriers follow the tiles (16 bytes more).
#include <cmath>

#include "attention/attention.cuh"
#include "attention/attention_wgmma.cuh"
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using attn_wgmma::at;
using attn_wgmma::load_tile;
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
constexpr int BT = kAttnMmaTile;  // keys of the block, queries of a step
constexpr int HP = 2;             // query heads per block
constexpr int NT = 256;           // two warpgroups
static_assert(BT == 64, "m64 products over 64-key and 64-query tiles");

// K, V, two stages of (Q, dO), Pᵀ (fp32), two stages of (lse, D) per query.
template <int HD> constexpr size_t wg_dkdv_smem() {
  return sizeof(bf16) * size_t(6 * BT) * HD + sizeof(float) * size_t(BT * BT + 4 * BT) + 16;
}

template <int HD, bool CAUSAL, bool MC>
__global__ void __launch_bounds__(NT, 1) attention_dkdv_wgmma_kernel(
    const __grid_constant__ attn_wgmma::KVMaps maps,              // MC: Q (maps.k), dO (maps.v) tiles of BT rows
    int ntiles,                                                   // MC: the grid's y is ntiles rounded up to even
    const bf16* __restrict__ dout, const bf16* __restrict__ q,    // (T, nH, HD)
    const bf16* __restrict__ k, const bf16* __restrict__ v,       // (T, nKV, HD)
    const float* __restrict__ lse, const float* __restrict__ dl,  // (T, nH)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int64_t T, int nH, int nKV, float scale,
    KOut dk, KOut dv,               // (T, nKV, HD)
    float* __restrict__ part,       // F32 (2, T, nH / 2, HD) partials per head pair when nH / nKV > 2, else null
    unsigned* __restrict__ cnt) {   // with part: (ntiles, nKV) counters of finished head pairs, zero at launch
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = HD / 64;             // 64-column blocks of dK / dV
  constexpr uint32_t TILE = BT * HD * 2;  // bytes of a K, V, Q or dO tile
  constexpr uint32_t RG = HD * 16;        // bytes between 8-row groups of a tile
  extern __shared__ __align__(128) unsigned char attn_smem[];
  const uint32_t sK = mma::smem_addr(attn_smem), sV = sK + TILE, sQO = sK + 2 * TILE;  // stage s: Q, dO at
  float* const sP = reinterpret_cast<float*>(attn_smem + 6 * TILE);                     // sQO + 2s·TILE
  float* const sLD = sP + BT * BT;  // stage s: lse at [2s·BT], D at [(2s + 1)·BT]

  const int pair = blockIdx.x;
  const uint32_t bar = sQO + 4 * TILE + sizeof(float) * (BT * BT + 4 * BT);  // MC: stage s's mbarrier at bar + 8s
  const uint32_t rank = MC ? attn_wgmma::cluster_rank() : 0;
  // MC: a padding block past the list (odd ntiles) only keeps its partner's cluster barriers.
  const bool live = !MC || int(blockIdx.y) < ntiles;
  const int yl = live ? int(blockIdx.y) : int(blockIdx.y) - 1;  // the padding block reads its partner's tile
  const int seq = tiles[2 * yl], k0 = tiles[2 * yl + 1];
  const int s1 = cu[seq + 1];
  int qstart = CAUSAL ? k0 : cu[seq];  // the first query tile that sees this key tile
  bool shared = false;                 // MC: both blocks of the cluster walk the same query tiles
  if constexpr (MC) {
    const int yp = int(blockIdx.y) ^ 1;
    shared = live && yp < ntiles && tiles[2 * yp] == seq;
    if (shared && CAUSAL) qstart = min(k0, tiles[2 * yp + 1]);
  }
  const int kvh = HP * pair / (nH / nKV);
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  const int warp = t >> 5, lane = t & 31;
  const int g = lane >> 2, tq = lane & 3;
  const float sl2 = scale * kLog2e;
  // Steps: query tile it / 2 of head HP·pair + it % 2 (stage it % 2).
  const int nit = HP * ((s1 - qstart + BT - 1) / BT);

  auto load_step = [&](int it) {
    const int st = it & 1, h = HP * pair + st, q0 = qstart + (it >> 1) * BT;
    if constexpr (MC) {
      // Thread 0: Q (rank 0) and dO (rank 1) into both blocks when shared, else both into this block.
      if (threadIdx.x == 0) {
        const uint32_t b = bar + 8 * st;
        attn_wgmma::expect_tx(b, 2 * TILE);
        const uint16_t mask = shared ? 3 : 0;
        for (int w = 0; w < 2; ++w) {
          if (shared && w != int(rank)) continue;
          const tma::ImageMap& m = w ? maps.v : maps.k;
#pragma unroll
          for (int half = 0; half < HD / 128; ++half)
            attn_wgmma::image_tile_mc(sQO + (2 * st + w) * TILE + half * BT * 256, m, q0, (HD / 128) * h + half, b,
                                      mask);
        }
      }
    } else {
      load_tile<HD, BT, NT>(sQO + 2 * st * TILE, q, q0, s1, nH, h);
      load_tile<HD, BT, NT>(sQO + (2 * st + 1) * TILE, dout, q0, s1, nH, h);
    }
    if (threadIdx.x < 2 * BT) {  // lse by threads 0..63, D by 64..127
      const int i = threadIdx.x & (BT - 1), which = threadIdx.x / BT;
      const int64_t row = q0 + i;
      const float* src = which ? dl : lse;
      mma::cp_async4(mma::smem_addr(sLD + (2 * st + which) * BT + i), row < s1 ? src + row * nH + h : src,
                     row < s1);
    }
  };
  if constexpr (MC) {
    if (threadIdx.x == 0) attn_wgmma::kv_bars_init(bar);
    attn_wgmma::cluster_sync();  // both blocks' barriers exist before either block's copies signal them
    if (!live) {
      attn_wgmma::cluster_sync();  // the partner's last one
      return;
    }
  }
  load_tile<HD, BT, NT>(sK, k, k0, s1, nKV, kvh);
  load_tile<HD, BT, NT>(sV, v, k0, s1, nKV, kvh);
  load_step(0);
  mma::cp_async_commit();

  static_assert(HD == 256, "one m64n256 accumulator");
  float acc[128];  // warpgroup 0: dV, warpgroup 1: dK / scale (m64n256 layout: column 8j + 2tq + e of register 4j + 2r + e)
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;

  // First product: A = K (warpgroup 0) or V (1), [key][dim] K-major; B = Q or dO stored [query][dim]: K-major.
  // Second product: B = dO (warpgroup 0) or Q (1), [query][dim] with n = dims contiguous: MN-major.
  const uint64_t dA = wgmma::desc(wg ? sV : sK, 128, RG);
  const int key0 = k0 + warp * 16 + g;  // key of registers 4j, 4j+1; 4j+2, 4j+3 are key0 + 8

  for (int it = 0; it < nit; ++it) {
    const int st = it & 1, q0 = qstart + (it >> 1) * BT;
    const uint32_t sQ = sQO + 2 * st * TILE, sO = sQ + TILE;
    mma::cp_async_wait<0>();
    // Step it landed for all threads (cp.async); both warpgroups (MC, shared: of both blocks) are done with step
    // it-1 (the other stage). MC: after step 0 (K / V by cp.async) wgmma reads only TMA-written tiles, so no
    // proxy fence, and the cluster barrier is relaxed (the block barrier orders the lse / D copies).
    if (!MC || it == 0) wgmma::fence_proxy_async();
    if (MC && shared) {
      if (it == 0) {
        attn_wgmma::cluster_sync();
      } else {
        attn_wgmma::cluster_sync_relaxed();
        __syncthreads();
      }
    } else {
      __syncthreads();
    }
    if constexpr (MC) {
      if (it + 1 < nit) load_step(it + 1);  // into the other stage (TMA: one thread)
      mma::cp_async_commit();
      attn_wgmma::kv_wait(bar + 8 * st, (it >> 1) & 1);
      if (CAUSAL && q0 + BT <= k0) continue;  // shared walk: every query of the step precedes every key
    }

    if (wg == 1) attn_wgmma::bar_sync(1, NT);  // warpgroup 0's Sᵀ is done
    // Q / dO as B: core layout (K-major LBO / SBO 128 / RG), or MC's image layout (1024 / 128), and MN-major.
    constexpr uint32_t CB = BT * 16;
    const uint64_t dB = MC ? wgmma::desc(wg ? sO : sQ, CB, 128) : wgmma::desc(wg ? sO : sQ, 128, RG);
    const uint64_t dB2 = MC ? wgmma::desc(wg ? sQ : sO, 128, CB) : wgmma::desc(wg ? sQ : sO, RG, 128);
    constexpr uint32_t KSTEP = MC ? 2 * CB : 256;
    float x[32];  // Sᵀ (warpgroup 0) or dPᵀ (1): key rows, query columns
#pragma unroll
    for (int i = 0; i < 32; ++i) x[i] = 0.f;
    wgmma::fence_operands(x);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) wgmma::mma_m64n64<0, 0>(x, at(dA, 256 * kk), at(dB, KSTEP * kk), kk > 0);
    wgmma::commit();
    if constexpr (!MC) {
      if (it + 1 < nit) load_step(it + 1);  // into the other stage, while the product runs
      mma::cp_async_commit();
    }
    wgmma::wait<0>();
    wgmma::fence_operands(x);

    // Register 4j + 2r + e: key key0 + 8r, query column c = 8j + 2tq + e of the step.
    const float* L = sLD + 2 * st * BT;
    if (wg == 0) {
      attn_wgmma::bar_arrive(1, NT);
      // Masks only where a query precedes a key of the tile (causal: the diagonal step) or passes the end.
      const bool masked = (CAUSAL && q0 < k0 + BT) || q0 + BT > s1;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 lj = *reinterpret_cast<const float2*>(L + 8 * j + 2 * tq);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * j + 2 * tq + (e & 1), key = key0 + (e >> 1) * 8, i = q0 + c;
          const bool valid = !masked || ((!CAUSAL || key <= i) && i < s1);
          const float lq = (e & 1 ? lj.y : lj.x) * kLog2e;
          x[4 * j + e] = valid ? exp2f(fmaf(x[4 * j + e], sl2, -lq)) : 0.f;
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j)
        reinterpret_cast<float4*>(sP)[j * 128 + t] = make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
      attn_wgmma::bar_arrive(2, NT);
    } else {
      attn_wgmma::bar_sync(2, NT);  // Pᵀ of this step
      const float* D = L + BT;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 dj = *reinterpret_cast<const float2*>(D + 8 * j + 2 * tq);
        const float4 p = reinterpret_cast<const float4*>(sP)[j * 128 + t];  // registers 4j .. 4j+3
        x[4 * j] = p.x * (x[4 * j] - dj.x);  // dSᵀ
        x[4 * j + 1] = p.y * (x[4 * j + 1] - dj.y);
        x[4 * j + 2] = p.z * (x[4 * j + 2] - dj.x);
        x[4 * j + 3] = p.w * (x[4 * j + 3] - dj.y);
      }
    }
    attn_wgmma::score_product_n256<BT / 16>(acc, x, dB2, MC ? 128 : RG);  // dV += Pᵀ·dO, dK += dSᵀ·Q
  }
  mma::cp_async_wait<0>();
  if constexpr (MC) attn_wgmma::cluster_sync();  // no block leaves while its peer may still signal it

  // dk = scale·acc of warpgroup 1, dv = acc of warpgroup 0 (or their F32 partials).
  const int64_t rows = part ? int64_t(nH / HP) : int64_t(nKV), row_head = part ? pair : kvh;
  const KOut out = part ? KOut{part + (wg ? 0 : T * rows * HD), KType::F32} : (wg ? dk : dv);
  const bool aligned = attn_wgmma::pair_aligned(out);
  const float mul = wg ? scale : 1.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = key0 + r * 8;
    if (key < s1)
      attn_wgmma::store_row<NB>(out, aligned, (key * rows + row_head) * HD + 2 * tq, r, mul,
                                [&](int b, int i) { return acc[32 * b + i]; });
  }
  if (!part) return;
  // The kv head's sum over its head pairs, by the pair that finishes last (the group sum kernel's order and
  // arithmetic: 0 + Σ over the pairs in order, each partial as stored): partials written, fenced, counted; the
  // last block reads the others' from L2.
  const int np = nH / nKV / HP, p0 = kvh * np;
  unsigned* const last = reinterpret_cast<unsigned*>(sLD);  // shared memory is free: every product is waited for
  attn_wgmma::gpu_fence();
  __syncthreads();
  if (threadIdx.x == 0) *last = attn_wgmma::count_done(cnt + int64_t(yl) * nKV + kvh) == unsigned(np - 1);
  __syncthreads();
  if (!*last) return;
  attn_wgmma::gpu_fence();
  const KOut fin = wg ? dk : dv;
  const bool fin_aligned = attn_wgmma::pair_aligned(fin);
  const float* const src = static_cast<const float*>(out.p);
  // Per row half and 64-column block: every partial's 16 values loaded first (independent L2 reads in flight
  // together; a load after a store to dk / dv would have to wait for it), then summed and stored.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = key0 + r * 8;
    if (key >= s1) continue;
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      float2 sum[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) sum[j] = make_float2(0.f, 0.f);
      for (int m = 0; m < np; ++m) {
        float2 x[8];
        if (p0 + m == pair) {
#pragma unroll
          for (int j = 0; j < 8; ++j)
            x[j] = make_float2(mul * acc[32 * b + 4 * j + 2 * r], mul * acc[32 * b + 4 * j + 2 * r + 1]);
        } else {
          const float* row = src + (key * rows + p0 + m) * HD + 64 * b + 2 * tq;
#pragma unroll
          for (int j = 0; j < 8; ++j) x[j] = attn_wgmma::ld_l2_pair(row + 8 * j);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[j] = make_float2(sum[j].x + x[j].x, sum[j].y + x[j].y);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t i = (key * nKV + kvh) * HD + 64 * b + 8 * j + 2 * tq;
        if (fin_aligned) {
          st_pair<true>(fin, i, sum[j].x, sum[j].y);
        } else {
          st(fin, i, sum[j].x);
          st(fin, i + 1, sum[j].y);
        }
      }
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/attention/attention_emu.cpp)
template <int HD, bool CAUSAL, bool MC>
cudaError_t launch_dkdv_kernel(const KernelPolicy& pol, const attn_wgmma::KVMaps& maps, KIn dout, KIn q, KIn k,
                               KIn v, const float* lse, const float* dl, const int32_t* cu, const int32_t* tiles,
                               int ntiles, int64_t T, int64_t nH, int64_t nKV, float scale, KOut dk, KOut dv,
                               float* part, unsigned* cnt, cudaStream_t s) {
  // Head pairs vary fastest so the first-launched blocks are the host's most expensive tiles, in all heads.
  const unsigned ny = static_cast<unsigned>(MC ? (ntiles + 1) / 2 * 2 : ntiles);
  return attn_wgmma::launch(pol, attention_dkdv_wgmma_kernel<HD, CAUSAL, MC>,
                            dim3(static_cast<unsigned>(nH / HP), ny), NT, wg_dkdv_smem<HD>(), dim3(1, MC ? 2 : 1),
                            s, maps, ntiles, static_cast<const bf16*>(dout.p), static_cast<const bf16*>(q.p),
                            static_cast<const bf16*>(k.p), static_cast<const bf16*>(v.p), lse, dl, cu, tiles, T,
                            static_cast<int>(nH), static_cast<int>(nKV), scale, dk, dv,
                            nH / nKV > HP ? part : nullptr, nH / nKV > HP ? cnt : nullptr);
}

template <int HD, bool CAUSAL>
cudaError_t run_dkdv_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse,
                           const float* dl, const int32_t* cu, const int32_t* tiles, int ntiles, int64_t T,
                           int64_t nH, int64_t nKV, float scale, KOut dk, KOut dv, float* part, cudaStream_t s) {
  // GQA > 2: the finished-pair counters after the partials (the scratch's second half), zeroed here.
  unsigned* cnt = nullptr;
  if (nH / nKV > HP) {
    cnt = reinterpret_cast<unsigned*>(part + 2 * T * (nH / HP) * HD);
    if (cudaError_t e = cudaMemsetAsync(cnt, 0, sizeof(unsigned) * size_t(ntiles) * size_t(nKV), s);
        e != cudaSuccess)
      return e;
  }
  // The cluster's maps: Q and dO (T, nH, 256) in 64-row tiles (maps.k: Q, maps.v: dO).
  attn_wgmma::KVMaps maps{};
  if (attn_wgmma::encode_kv_maps(maps, q.p, dout.p, T, nH, BT))
    return launch_dkdv_kernel<HD, CAUSAL, true>(pol, maps, dout, q, k, v, lse, dl, cu, tiles, ntiles, T, nH, nKV,
                                                scale, dk, dv, part, cnt, s);
  return launch_dkdv_kernel<HD, CAUSAL, false>(pol, maps, dout, q, k, v, lse, dl, cu, tiles, ntiles, T, nH, nKV,
                                               scale, dk, dv, part, cnt, s);
}
#endif  // DT_ATTN_EMU

}  // namespace

bool attention_dkdv_wgmma_supported(int hd, int64_t nH, int64_t nKV) {
  return hd == 256 && nKV > 0 && nH % nKV == 0 && (nH / nKV) % HP == 0;
}

size_t attention_dkdv_wgmma_smem(int /*hd*/) { return wg_dkdv_smem<256>(); }

int64_t attention_dkdv_wgmma_partial_heads(int64_t nH, int64_t nKV) { return nH / nKV > HP ? nH / HP : 0; }

#ifndef DT_ATTN_EMU
cudaError_t launch_attention_dkdv_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse,
                                        const float* dl, const int32_t* cu_seqlens, const int32_t* k_tiles,
                                        int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale,
                                        bool causal, KOut dk, KOut dv, float* part, cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  if (!pol.hopper() || dout.t != KType::BF16 || q.t != KType::BF16 || k.t != KType::BF16 ||
      v.t != KType::BF16 || !attention_dkdv_wgmma_supported(hd, nH, nKV) ||
      (attention_dkdv_wgmma_partial_heads(nH, nKV) > 0 && part == nullptr))
    return cudaErrorInvalidValue;
  return causal ? run_dkdv_wgmma<256, true>(pol, dout, q, k, v, lse, dl, cu_seqlens, k_tiles, ntiles, T, nH, nKV,
                                            scale, dk, dv, part, s)
                : run_dkdv_wgmma<256, false>(pol, dout, q, k, v, lse, dl, cu_seqlens, k_tiles, ntiles, T, nH, nKV,
                                             scale, dk, dv, part, s);
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
