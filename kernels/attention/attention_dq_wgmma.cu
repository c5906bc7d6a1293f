// The dQ kernel of the attention backward on Hopper's warpgroup tensor cores (wgmma, sm_90a) at head_dim 256:
// attention_dq_mma_kernel's contract (attention_bwd_mma.cu: dq_i = scale·Σ_j ds_ij·k_j with
// ds_ij = p_ij·(dp_ij − D_i), p_ij = exp(s_ij − lse_i), dp_ij = do_i·v_j), run by launch_attention_bwd_mma under
// the Hopper policy when the query heads of a kv head come in pairs (nH / nKV even).
// One block of two warpgroups per (pair of query heads of one kv head, 64-query tile), as the Hopper forward
// (attention_fwd_wgmma.cu): warpgroup g takes head 2·blockIdx.x + g, both read the same K and V tiles. Per
// 32-key tile: S = Q·Kᵀ and dP = dO·Vᵀ (16 wgmma m64n32k16 each, operands from shared memory), dS in
// registers (masked, bf16) as the A fragments of dQ += dS·K (8 wgmma m64n64k16, K read MN-major).
// Shared memory (no-swizzle core layout): Q and dO tiles of both heads (64 x 256 bf16 each) and two (K, V)
// buffers of 32 keys, 192 KiB, one block per SM: key tile j+1 arrives by cp.async while tile j is computed.
// MC: the forward's cluster of two head pairs sharing each K/V tile (TMA multicast, image layout;
// attn_wgmma::kv_issue), the buffers' mbarriers after the tiles.
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
constexpr int BQ = kAttnMmaTile;  // query rows per warpgroup
constexpr int BK = 32;            // keys per tile
constexpr int NG = 2;             // warpgroups (query heads) per block
constexpr int NT = 128 * NG;
static_assert(BQ == 64 && BQ % BK == 0, "m64 products; diagonal tiles assume BK divides BQ");

// Q and dO tiles of the NG heads, then two (K, V) buffers.
template <int HD> constexpr size_t wg_dq_smem() { return sizeof(bf16) * size_t(2 * NG * BQ + 4 * BK) * HD + 16; }

template <int HD, bool CAUSAL, bool MC>
__global__ void __launch_bounds__(NT, 1) attention_dq_wgmma_kernel(
    const __grid_constant__ attn_wgmma::KVMaps maps,              // MC: K, V tiles of BK rows
    const bf16* __restrict__ dout, const bf16* __restrict__ q,    // (T, nH, HD)
    const bf16* __restrict__ k, const bf16* __restrict__ v,       // (T, nKV, HD)
    const float* __restrict__ lse, const float* __restrict__ dl,  // (T, nH)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int nH, int nKV, float scale,
    KOut dq) {  // (T, nH, HD)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = HD / 64;              // 64-column blocks of dQ
  constexpr uint32_t QT = BQ * HD * 2;     // bytes of a Q or dO tile
  constexpr uint32_t KT = BK * HD * 2;     // bytes of a K or V tile
  constexpr uint32_t RG = HD * 16;         // bytes between 8-row groups of a tile
  extern __shared__ __align__(128) unsigned char attn_smem[];
  const uint32_t sQ = mma::smem_addr(attn_smem), sO = sQ + NG * QT, sKV = sO + NG * QT;

  const int wg = threadIdx.x >> 7;
  const int h = NG * blockIdx.x + wg;
  const int seq = tiles[2 * blockIdx.y], q0 = tiles[2 * blockIdx.y + 1];
  const int s0 = cu[seq], s1 = cu[seq + 1];
  const int kvh = h / (nH / nKV);  // the same for the block's heads (nH / nKV is even)
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const float sl2 = scale * kLog2e;

  const uint32_t bar = sKV + 4 * KT;  // MC: buffer b's mbarrier at bar + 8b
  const uint32_t rank = MC ? attn_wgmma::cluster_rank() : 0;
#pragma unroll
  for (int i = 0; i < NG; ++i) {
    load_tile<HD, BQ, NT>(sQ + i * QT, q, q0, s1, nH, NG * blockIdx.x + i);
    load_tile<HD, BQ, NT>(sO + i * QT, dout, q0, s1, nH, NG * blockIdx.x + i);
  }
  if constexpr (MC) {
    if (threadIdx.x == 0) attn_wgmma::kv_bars_init(bar);
    attn_wgmma::cluster_sync();  // both blocks' barriers exist before either block's copies signal them
    if (threadIdx.x == 0) attn_wgmma::kv_issue<BK, HD>(maps, sKV, bar, s0, kvh, rank);
  } else {
    load_tile<HD, BK, NT>(sKV, k, s0, s1, nKV, kvh);
    load_tile<HD, BK, NT>(sKV + KT, v, s0, s1, nKV, kvh);
  }
  mma::cp_async_commit();

  const int row0 = q0 + warp * 16 + g;  // token of registers 4j, 4j+1; 4j+2, 4j+3 are row0 + 8
  float lrow[2], drow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + r * 8;
    lrow[r] = row < s1 ? lse[row * nH + h] * kLog2e : 0.f;
    drow[r] = row < s1 ? dl[row * nH + h] : 0.f;
  }
  float acc[NB][32];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[b][i] = 0.f;

  // Q, dO (A, K-major), K and V (B stored [key][dim]: K-major) for S and dP; K MN-major (n = dims) for dQ.
  const uint64_t dQd = wgmma::desc(sQ + wg * QT, 128, RG), dOd = wgmma::desc(sO + wg * QT, 128, RG);

  const int kend = CAUSAL ? min(q0 + BQ, s1) : s1;
  const int nk = (kend - s0 + BK - 1) / BK;
  for (int j = 0; j < nk; ++j) {
    const int k0 = s0 + j * BK;
    const uint32_t sK = sKV + (j & 1) * 2 * KT, sV = sK + KT;
    attn_wgmma::key_step_sync<MC>(j);
    if (j + 1 < nk) {
      const uint32_t nK = sKV + ((j + 1) & 1) * 2 * KT;
      if constexpr (MC) {
        if (threadIdx.x == 0) attn_wgmma::kv_issue<BK, HD>(maps, nK, bar + 8 * ((j + 1) & 1), k0 + BK, kvh, rank);
      } else {
        load_tile<HD, BK, NT>(nK, k, k0 + BK, s1, nKV, kvh);
        load_tile<HD, BK, NT>(nK + KT, v, k0 + BK, s1, nKV, kvh);
      }
    }
    mma::cp_async_commit();
    if constexpr (MC) attn_wgmma::kv_wait(bar + 8 * (j & 1), (j >> 1) & 1);
    // K, V (B, K-major) and K (B, MN-major): core layout (LBO / SBO 128 / RG), or MC's image layout (BK·16 / 128).
    constexpr uint32_t CB = BK * 16;  // MC: bytes between 8-column blocks
    const uint64_t dK = MC ? wgmma::desc(sK, CB, 128) : wgmma::desc(sK, 128, RG);
    const uint64_t dV = MC ? wgmma::desc(sV, CB, 128) : wgmma::desc(sV, 128, RG);
    const uint64_t dKt = MC ? wgmma::desc(sK, 128, CB) : wgmma::desc(sK, RG, 128);
    constexpr uint32_t KSTEP = MC ? 2 * CB : 256;  // bytes between k16 steps of K and V

    float s[16], dp[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = dp[i] = 0.f;
    wgmma::fence_operands(s);
    wgmma::fence_operands(dp);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) wgmma::mma_m64n32<0, 0>(s, at(dQd, 256 * kk), at(dK, KSTEP * kk), kk > 0);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) wgmma::mma_m64n32<0, 0>(dp, at(dOd, 256 * kk), at(dV, KSTEP * kk), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);
    wgmma::fence_operands(dp);

    // Some key of the tile may lie past the first query row (causal) or past the sequence end.
    const bool masked = CAUSAL ? k0 + BK - 1 > q0 : k0 + BK > s1;
#pragma unroll
    for (int jb = 0; jb < BK / 8; ++jb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, col = k0 + jb * 8 + 2 * tq + (e & 1), row = row0 + r * 8;
        const bool valid = !masked || (CAUSAL ? col <= row && row < s1 : col < s1);
        const float p = valid ? exp2f(fmaf(s[4 * jb + e], sl2, -lrow[r])) : 0.f;
        s[4 * jb + e] = p * (dp[4 * jb + e] - drow[r]);  // dS
      }
    if constexpr (MC)
      attn_wgmma::score_product<BK / 16>(acc, s, dKt, 128, 8 * CB);  // dQ += dS·K
    else
      attn_wgmma::score_product<BK / 16>(acc, s, dKt, RG);
  }
  mma::cp_async_wait<0>();
  if constexpr (MC) attn_wgmma::cluster_sync();  // no block leaves while its peer may still signal it

  const bool aligned = attn_wgmma::pair_aligned(dq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + r * 8;
    if (row < s1)
      attn_wgmma::store_row<NB>(dq, aligned, (row * nH + h) * HD + 2 * tq, r, scale,
                                [&](int b, int i) { return acc[b][i]; });
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/attention/attention_emu.cpp)
template <int HD, bool CAUSAL, bool MC>
cudaError_t launch_dq_kernel(const KernelPolicy& pol, const attn_wgmma::KVMaps& maps, KIn dout, KIn q, KIn k,
                             KIn v, const float* lse, const float* dl, const int32_t* cu, const int32_t* tiles,
                             int ntiles, int64_t nH, int64_t nKV, float scale, KOut dq, cudaStream_t s) {
  // Head pairs vary fastest so the first-launched blocks are the host's most expensive tiles, in all heads.
  return attn_wgmma::launch(pol, attention_dq_wgmma_kernel<HD, CAUSAL, MC>,
                            dim3(static_cast<unsigned>(nH / NG), static_cast<unsigned>(ntiles)), NT,
                            wg_dq_smem<HD>(), dim3(MC ? 2 : 1), s, maps, static_cast<const bf16*>(dout.p),
                            static_cast<const bf16*>(q.p), static_cast<const bf16*>(k.p),
                            static_cast<const bf16*>(v.p), lse, dl, cu, tiles, static_cast<int>(nH),
                            static_cast<int>(nKV), scale, dq);
}

template <int HD, bool CAUSAL>
cudaError_t run_dq_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse, const float* dl,
                         const int32_t* cu, const int32_t* tiles, int ntiles, int64_t T, int64_t nH, int64_t nKV,
                         float scale, KOut dq, cudaStream_t s) {
  attn_wgmma::KVMaps maps{};
  if (attention_wgmma_cluster(nH, nKV) && attn_wgmma::encode_kv_maps(maps, k.p, v.p, T, nKV, BK))
    return launch_dq_kernel<HD, CAUSAL, true>(pol, maps, dout, q, k, v, lse, dl, cu, tiles, ntiles, nH, nKV, scale,
                                              dq, s);
  return launch_dq_kernel<HD, CAUSAL, false>(pol, maps, dout, q, k, v, lse, dl, cu, tiles, ntiles, nH, nKV, scale,
                                             dq, s);
}

#endif  // DT_ATTN_EMU

}  // namespace

bool attention_dq_wgmma_supported(int hd, int64_t nH, int64_t nKV) {
  return hd == 256 && nKV > 0 && nH % nKV == 0 && (nH / nKV) % NG == 0;
}

size_t attention_dq_wgmma_smem(int /*hd*/) { return wg_dq_smem<256>(); }

#ifndef DT_ATTN_EMU
cudaError_t launch_attention_dq_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse,
                                      const float* dl, const int32_t* cu_seqlens, const int32_t* q_tiles,
                                      int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale,
                                      bool causal, KOut dq, cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  if (!pol.hopper() || dout.t != KType::BF16 || q.t != KType::BF16 || k.t != KType::BF16 ||
      v.t != KType::BF16 || !attention_dq_wgmma_supported(hd, nH, nKV))
    return cudaErrorInvalidValue;
  return causal ? run_dq_wgmma<256, true>(pol, dout, q, k, v, lse, dl, cu_seqlens, q_tiles, ntiles, T, nH, nKV,
                                          scale, dq, s)
                : run_dq_wgmma<256, false>(pol, dout, q, k, v, lse, dl, cu_seqlens, q_tiles, ntiles, T, nH, nKV,
                                           scale, dq, s);
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
