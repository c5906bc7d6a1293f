// Varlen GQA attention forward on Hopper's warpgroup tensor cores (wgmma, sm_90a) at head_dim 256: the
// contract and the tiles of attention_fwd_mma.cu (kAttnMmaTile = 64 query rows, 64-key tiles, causal or full
// attention, lse out), chosen by launch_attention_fwd_mma under the Hopper policy when the query heads of a
// kv head come in pairs (nH / nKV even: every Qwen3.5 text model).
// One block of two warpgroups per (pair of query heads of one kv head, 64-query tile): warpgroup g takes head
// 2·blockIdx.x + g, warp w of it query rows 16w..16w+15. Both read the same K and V tiles, so a block loads
// each key tile once for 128 query rows (the 64-row mma.sync kernel, L2-bound at hd 256, loads it per 64).
// Per key tile: S = Q·Kᵀ (16 wgmma m64n64k16, Q and K from shared memory, fp32 accumulators), the causal /
// end-of-sequence mask, online softmax in registers (base-2 exponentials of pre-scaled scores), P packed to
// bf16 from the S accumulators straight into wgmma A fragments (register-A form: the m64nN accumulator
// layout is the mma.m16n8 C layout, whose pairs are the A layout), O += P·V (16 wgmma m64n64k16, V read
// MN-major from shared memory, O = 4 accumulators of 64 columns).
// Shared memory (no-swizzle core-matrix layout of common/wgmma.cuh): two Q tiles and two K/V buffer pairs
// (64 x 256 bf16 each), 192 KiB, one block per SM: key tile j+1 arrives by cp.async while tile j is computed.
// MC (Hopper policy, four or more query heads per kv head): the blocks of head pairs 2c and 2c+1 form a cluster
// and receive the K/V tiles by TMA multicast (attn_wgmma::kv_issue: image layout, one copy of each tile per
// 256 query rows), with the buffers' mbarriers after the tiles (16 bytes more).
#include <cmath>

#include "attention/attention.cuh"
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "attention/attention_wgmma.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using attn_wgmma::at;
using attn_wgmma::load_tile;
constexpr int BQ = kAttnMmaTile;  // query rows per warpgroup
constexpr int BK = 64;            // keys per tile
constexpr int NG = 2;             // warpgroups (query heads) per block
constexpr int NT = 128 * NG;
static_assert(BQ == 64 && BK == 64, "m64 products; diagonal tiles assume BQ == BK");

// Q tiles of the NG heads, then two (K, V) buffers.
template <int HD> constexpr size_t wg_fwd_smem() { return sizeof(bf16) * size_t(NG * BQ + 4 * BK) * HD + 16; }

template <int HD, bool CAUSAL, bool MC>
__global__ void __launch_bounds__(NT, 1) attention_fwd_wgmma_kernel(
    const __grid_constant__ attn_wgmma::KVMaps maps,  // MC: K, V tiles of BK rows
    const bf16* __restrict__ q,  // (T, nH, HD)
    const bf16* __restrict__ k,  // (T, nKV, HD)
    const bf16* __restrict__ v,  // (T, nKV, HD)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int nH, int nKV, float scale,
    KOut o,                      // (T, nH, HD)
    float* __restrict__ lse) {   // (T, nH)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = HD / 64;                // 64-column blocks of O
  constexpr uint32_t TILE = BK * HD * 2;     // bytes of a Q, K or V tile
  constexpr uint32_t RG = HD * 16;           // bytes between 8-row groups of a tile
  extern __shared__ __align__(128) unsigned char attn_smem[];
  const uint32_t sQ = mma::smem_addr(attn_smem), sKV = sQ + NG * TILE;  // buffer b: K at sKV + 2b·TILE, V next

  const int wg = threadIdx.x >> 7;
  const int h = NG * blockIdx.x + wg;
  const int seq = tiles[2 * blockIdx.y], q0 = tiles[2 * blockIdx.y + 1];
  const int s0 = cu[seq], s1 = cu[seq + 1];
  const int kvh = h / (nH / nKV);  // the same for the block's heads (nH / nKV is even)
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;

  const uint32_t bar = sKV + 4 * TILE;  // MC: buffer b's mbarrier at bar + 8b
  const uint32_t rank = MC ? attn_wgmma::cluster_rank() : 0;
#pragma unroll
  for (int i = 0; i < NG; ++i) load_tile<HD, 64, NT>(sQ + i * TILE, q, q0, s1, nH, NG * blockIdx.x + i);
  if constexpr (MC) {
    if (threadIdx.x == 0) attn_wgmma::kv_bars_init(bar);
    attn_wgmma::cluster_sync();  // both blocks' barriers exist before either block's copies signal them
    if (threadIdx.x == 0) attn_wgmma::kv_issue<BK, HD>(maps, sKV, bar, s0, kvh, rank);
  } else {
    load_tile<HD, 64, NT>(sKV, k, s0, s1, nKV, kvh);
    load_tile<HD, 64, NT>(sKV + TILE, v, s0, s1, nKV, kvh);
  }
  mma::cp_async_commit();

  float acc[NB][32];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[b][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of the raw scores of rows g and g+8
  float l[2] = {0.f, 0.f};              // this thread's partial row sums (its 2 of every 8 columns)
  const float sl2 = scale * 1.4426950408889634f;  // exp(scale·x) = exp2(sl2·x)

  // Q (A, K-major: k = head dims), K (B stored [key][dim]: K-major), V (B = [key][dim] with n = dims
  // contiguous: MN-major). LBO: core matrices adjacent in k, SBO: adjacent in m / n.
  const uint64_t dQ = wgmma::desc(sQ + wg * TILE, 128, RG);
  const int row0 = q0 + warp * 16 + g;  // token of registers 4j, 4j+1; 4j+2, 4j+3 are row0 + 8

  // Key tiles up to the diagonal (q0 - s0 is a multiple of BQ), or all of the sequence's.
  const int nk = CAUSAL ? (q0 - s0) / BK + 1 : (s1 - s0 + BK - 1) / BK;
  for (int j = 0; j < nk; ++j) {
    const int k0 = s0 + j * BK;
    const uint32_t sK = sKV + (j & 1) * 2 * TILE, sV = sK + TILE;
    attn_wgmma::key_step_sync<MC>(j);
    if (j + 1 < nk) {
      const uint32_t nK = sKV + ((j + 1) & 1) * 2 * TILE;
      if constexpr (MC) {
        if (threadIdx.x == 0) attn_wgmma::kv_issue<BK, HD>(maps, nK, bar + 8 * ((j + 1) & 1), k0 + BK, kvh, rank);
      } else {
        load_tile<HD, 64, NT>(nK, k, k0 + BK, s1, nKV, kvh);
        load_tile<HD, 64, NT>(nK + TILE, v, k0 + BK, s1, nKV, kvh);
      }
    }
    mma::cp_async_commit();
    if constexpr (MC) attn_wgmma::kv_wait(bar + 8 * (j & 1), (j >> 1) & 1);
    // K (B, K-major) and V (B, MN-major): core layout (LBO / SBO 128 / RG), or MC's image layout (BK·16 / 128).
    constexpr uint32_t CB = BK * 16;  // MC: bytes between 8-column blocks
    const uint64_t dK = MC ? wgmma::desc(sK, CB, 128) : wgmma::desc(sK, 128, RG);
    const uint64_t dV = MC ? wgmma::desc(sV, 128, CB) : wgmma::desc(sV, RG, 128);
    constexpr uint32_t KSTEP = MC ? 2 * CB : 256;  // bytes between k16 steps of K

    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.f;
    wgmma::fence_operands(s);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) wgmma::mma_m64n64<0, 0>(s, at(dQ, 256 * kk), at(dK, KSTEP * kk), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);

    // Causal and end-of-sequence mask, only where a key can exceed the tile's first query (causal) or the
    // sequence end (full).
    if (CAUSAL ? k0 + BK - 1 > q0 : k0 + BK > s1) {
#pragma unroll
      for (int jb = 0; jb < 8; ++jb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = k0 + jb * 8 + 2 * tq + (e & 1), row = row0 + (e >> 1) * 8;
          if ((CAUSAL && col > row) || col >= s1) s[4 * jb + e] = -INFINITY;
        }
    }
    // Online softmax per row half r (r = 0: registers 4j, 4j+1, row g; r = 1: 4j+2, 4j+3, row g+8).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int jb = 0; jb < 8; ++jb) mx = fmaxf(mx, fmaxf(s[4 * jb + 2 * r], s[4 * jb + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Every row sees key s0 in tile 0, so mx is finite; the guard keeps -inf - -inf out regardless.
      const float mu = mx == -INFINITY ? 0.f : mx;
      const float corr = exp2f((m[r] - mu) * sl2);  // m = -inf -> 0
      const float off = mu * sl2;
      float sum = 0.f;
#pragma unroll
      for (int jb = 0; jb < 8; ++jb) {
        const float p0 = exp2f(fmaf(s[4 * jb + 2 * r], sl2, -off));
        const float p1 = exp2f(fmaf(s[4 * jb + 2 * r + 1], sl2, -off));
        s[4 * jb + 2 * r] = p0;
        s[4 * jb + 2 * r + 1] = p1;
        sum += p0 + p1;
      }
      l[r] = l[r] * corr + sum;
      m[r] = mx;
#pragma unroll
      for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int jb = 0; jb < 8; ++jb) {
          acc[b][4 * jb + 2 * r] *= corr;
          acc[b][4 * jb + 2 * r + 1] *= corr;
        }
    }
    if constexpr (MC)
      attn_wgmma::score_product<BK / 16>(acc, s, dV, 128, 8 * CB);  // O += P·V
    else
      attn_wgmma::score_product<BK / 16>(acc, s, dV, RG);
  }
  mma::cp_async_wait<0>();
  if constexpr (MC) attn_wgmma::cluster_sync();  // no block leaves while its peer may still signal it

  const bool aligned = attn_wgmma::pair_aligned(o);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t row = row0 + r * 8;
    if (row < s1) {
      const float inv = 1.f / sum;  // sum >= 1: the row maximum contributes exp2(0)
      attn_wgmma::store_row<NB>(o, aligned, (row * nH + h) * HD + 2 * tq, r, inv,
                                [&](int b, int i) { return acc[b][i]; });
      if (tq == 0) lse[row * nH + h] = m[r] * scale + logf(sum);
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/attention/attention_emu.cpp)
template <int HD, bool CAUSAL, bool MC>
cudaError_t launch_fwd_kernel(const KernelPolicy& pol, const attn_wgmma::KVMaps& maps, KIn q, KIn k, KIn v,
                              const int32_t* cu, const int32_t* tiles, int ntiles, int64_t nH, int64_t nKV,
                              float scale, KOut o, float* lse, cudaStream_t s) {
  // Head pairs vary fastest so the first-launched blocks are the host's most expensive tiles, in all heads.
  return attn_wgmma::launch(pol, attention_fwd_wgmma_kernel<HD, CAUSAL, MC>,
                            dim3(static_cast<unsigned>(nH / NG), static_cast<unsigned>(ntiles)), NT,
                            wg_fwd_smem<HD>(), dim3(MC ? 2 : 1), s, maps, static_cast<const bf16*>(q.p),
                            static_cast<const bf16*>(k.p), static_cast<const bf16*>(v.p), cu, tiles,
                            static_cast<int>(nH), static_cast<int>(nKV), scale, o, lse);
}

template <int HD, bool CAUSAL>
cudaError_t run_fwd_wgmma(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu, const int32_t* tiles,
                          int ntiles, int64_t T, int64_t nH, int64_t nKV, float scale, KOut o, float* lse,
                          cudaStream_t s) {
  attn_wgmma::KVMaps maps{};
  if (attention_wgmma_cluster(nH, nKV) && attn_wgmma::encode_kv_maps(maps, k.p, v.p, T, nKV, BK))
    return launch_fwd_kernel<HD, CAUSAL, true>(pol, maps, q, k, v, cu, tiles, ntiles, nH, nKV, scale, o, lse, s);
  return launch_fwd_kernel<HD, CAUSAL, false>(pol, maps, q, k, v, cu, tiles, ntiles, nH, nKV, scale, o, lse, s);
}

#endif  // DT_ATTN_EMU

}  // namespace

bool attention_fwd_wgmma_supported(int hd, int64_t nH, int64_t nKV) {
  return hd == 256 && nKV > 0 && nH % nKV == 0 && (nH / nKV) % NG == 0;
}

size_t attention_fwd_wgmma_smem(int /*hd*/) { return wg_fwd_smem<256>(); }

#ifndef DT_ATTN_EMU
cudaError_t launch_attention_fwd_wgmma(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens,
                                       const int32_t* tiles, int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd,
                                       float scale, bool causal, KOut o, float* lse, cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  if (!pol.hopper() || q.t != KType::BF16 || k.t != KType::BF16 || v.t != KType::BF16 ||
      !attention_fwd_wgmma_supported(hd, nH, nKV))
    return cudaErrorInvalidValue;
  return causal ? run_fwd_wgmma<256, true>(pol, q, k, v, cu_seqlens, tiles, ntiles, T, nH, nKV, scale, o, lse, s)
                : run_fwd_wgmma<256, false>(pol, q, k, v, cu_seqlens, tiles, ntiles, T, nH, nKV, scale, o, lse, s);
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
