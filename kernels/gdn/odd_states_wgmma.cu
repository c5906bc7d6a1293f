// The half-states keep's odd chunk states (the contract of gdn_odd_states_kernel, chunk_prep_mma.cu) on
// Hopper's warpgroup tensor cores with TMA copies (sm_90a). Item (p, h), value heads fastest: the state at
// chunk 2p + 1 from the kept one at 2p and its V',
//   S_{2p+1} = γ_last·S_{2p} + kᵀ·diag(ρ_k·e^{G_last−G})·V'   (k before the norm; zeros where chunk 2p + 1
//                                                              starts another sequence)
// with ρ_k from the k tile by the prep's lanes and sums (l2norm_row.cuh: bit-identical ρ), or as the forward
// prep kept it (rk_kept, copied with G: no ρ phase and one barrier less per item), and the scaled V'
// rounded to bf16 as the mma.sync kernel rounds it. Chunk 2p is never a sequence's last chunk here, so it is
// whole (64 rows).
// A persistent grid of one 256-thread block per SM; k, V' (64 rows) and S (128 rows) of the next item land by
// TMA (32-byte swizzled tiles, gdn_wgmma::sw) in the other of two buffer sets while this one computes.
// Warpgroup wg forms state rows 64wg .. 64wg + 63: A = kᵀ and B = the scaled V', both MN-major (8 wgmma
// m64n64k16 per warpgroup), then γ·S is added from the S tile and the rows leave as bf16.
#include <algorithm>
#include <cstdlib>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/l2norm_row.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
using gdn_chunk::next_chunk_continues;
using gdn_wgmma::as_frags;
using gdn_wgmma::desc_at;
using gdn_wgmma::desc_mn;
using gdn_wgmma::sw;
constexpr int C = kGdnChunk, D = 128, NT = 256;

struct Smem {                                   // byte offsets
  static constexpr uint32_t K = 0;              // k [64][dk] (one set; sets kSet apart)
  static constexpr uint32_t V = K + C * D * 2;  // V' [64][dv], then scaled in place
  static constexpr uint32_t S = V + C * D * 2;  // S_{2p} [dk][dv]
  static constexpr uint32_t kSet = S + D * D * 2;
  static constexpr uint32_t G = 2 * kSet;          // [2][64] G by set
  static constexpr uint32_t Rk = G + 2 * C * 4;    // [2][64] ρ_k by set
  static constexpr uint32_t bar = Rk + 2 * C * 4;  // two mbarriers, one per set
  static constexpr uint32_t bytes = bar + 16;      // 132,112
};
constexpr uint32_t kSetBytes = 2 * C * D * 2 + D * D * 2;

struct OddMaps {
  tma::ImageMap k, V, S;
};

__global__ void __launch_bounds__(NT, 1)
    gdn_odd_states_wgmma_kernel(const __grid_constant__ OddMaps maps, float eps, const float* Gc,
                                const int32_t* chunks, bf16* Sodd, int64_t HK, int64_t HV,
                                const int32_t* chunk_off, int nseq, int nitems, const float* rk_kept) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char gdn_smem[];
  const uint32_t sb = mma::smem_addr(gdn_smem), bar0 = sb + Smem::bar;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wq = warp & 3, g = lane >> 2, t4 = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  float* Gb = reinterpret_cast<float*>(gdn_smem + Smem::G);
  float* Rkb = reinterpret_cast<float*>(gdn_smem + Smem::Rk);

  // Item i: p = i / HV, h = i % HV; thread 0 issues its tiles into set b (if chunk 2p + 1 continues), threads
  // < 64 its G by cp.async.
  auto issue = [&](int i, int b) {
    const int p = i / static_cast<int>(HV), h = i % static_cast<int>(HV), ch = 2 * p;
    if (!next_chunk_continues(chunk_off, nseq, ch)) return;
    const int t0 = chunks[2 * ch];
    if (tid == 0) {
      const uint32_t set = sb + b * Smem::kSet, bar = bar0 + 8 * b;
      wgmma::fence_proxy_async();  // the set's last generic reads before the copies' writes
      tma::mbar_arrive_expect_tx(bar, kSetBytes);
      tma::image_tile(set + Smem::K, maps.k, t0, static_cast<int>(h / (HV / HK)), bar);
      tma::image_tile(set + Smem::V, maps.V, t0, h, bar);
      tma::image_tile(set + Smem::S, maps.S, static_cast<int>((int64_t(p) * HV + h) * D), 0, bar);
    }
    if (tid < C) mma::cp_async4(sb + Smem::G + 4 * (b * C + tid), Gc + (int64_t(t0) + tid) * HV + h, true);
    if (rk_kept && tid < C)  // chunk 2p is whole: its 64 rows all have ρ
      mma::cp_async4(sb + Smem::Rk + 4 * (b * C + tid), rk_kept + (int64_t(t0) + tid) * HK + h / (HV / HK),
                     true);
  };

  if (tid == 0) {
    tma::mbar_init(bar0, 1);
    tma::mbar_init(bar0 + 8, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (blockIdx.x < nitems) issue(blockIdx.x, 0);
  mma::cp_async_commit();
  uint32_t phase = 0;  // bit b: the parity of set b's next completion
  for (int i = blockIdx.x, n = 0; i < nitems; i += gridDim.x, ++n) {
    const int b = n & 1, p = i / static_cast<int>(HV), h = i % static_cast<int>(HV);
    mma::cp_async_wait<0>();
    __syncthreads();  // this item's G landed; the last item's reads of set b ^ 1 are done
    if (i + static_cast<int>(gridDim.x) < nitems) issue(i + gridDim.x, b ^ 1);
    mma::cp_async_commit();
    bf16* dst = Sodd + (int64_t(p) * HV + h) * D * D;
    if (!next_chunk_continues(chunk_off, nseq,
                              2 * p)) {  // chunk 2p + 1 starts another sequence: its state is zero
      uint4* so = reinterpret_cast<uint4*>(dst);
      for (int x = tid; x < D * D / 8; x += NT) so[x] = make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    const uint32_t set = sb + b * Smem::kSet;
    unsigned char* setp = gdn_smem + b * Smem::kSet;
    const float* G = Gb + b * C;
    float* Rk = Rkb + b * C;
    tma::mbar_wait(bar0 + 8 * b, (phase >> b) & 1);
    phase ^= 1u << b;

    if (!rk_kept) {  // ρ_k of the 64 rows: warp w takes rows 8w .. 8w + 7, 4 consecutive values a lane
                     // (the prep's lanes)
      constexpr int RW = C / (NT / 32);
      float4 kr[RW];
#pragma unroll
      for (int x = 0; x < RW; ++x) {
        const uint2 u = *reinterpret_cast<const uint2*>(setp + Smem::K + sw<C>(warp * RW + x, 4 * lane));
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
        const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
        kr[x] = make_float4(a.x, a.y, c.x, c.y);
      }
      float rk[RW];
      l2_rows_normalise(kr, 1.f, eps, rk);
#pragma unroll
      for (int x = 0; x < RW; ++x)
        if (lane == x) Rk[warp * RW + x] = rk[x];
      __syncthreads();
    }
    const float gl = G[C - 1];
    for (int x = tid; x < C * D / 8; x += NT) {  // V' rows times ρ_k·e^{G_last − G} (bf16, in place)
      const int r = (x % (C * 2)) >> 1;          // 16-byte piece x: two a row in each 16-column block
      uint4* v = reinterpret_cast<uint4*>(setp + Smem::V) + x;
      const float f = Rk[r], dc = expf(gl - G[r]);
      *v = mma::scale_bf16x8(*v, f, dc);
    }
    wgmma::fence_proxy_async();
    __syncthreads();  // the scaled V'

    float acc[2][32];
    wgmma::fence_operands(acc[0]);
    wgmma::fence_operands(acc[1]);
    wgmma::fence();
    const uint64_t A = desc_mn(set + Smem::K + 8192 * wg, 2048);  // kᵀ: rows 64wg .. of the state
#pragma unroll
    for (int nh = 0; nh < 2; ++nh) {
      const uint64_t B = desc_mn(set + Smem::V + 8192 * nh, 2048);  // value columns 64nh ..
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
        wgmma::mma_m64n64<1, 1>(acc[nh], desc_at(A, 512 * s), desc_at(B, 512 * s), s > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(acc[0]);
    wgmma::fence_operands(acc[1]);
    const float gam = expf(gl);
#pragma unroll
    for (int nh = 0; nh < 2; ++nh) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int row = 64 * wg + 16 * wq + g + 8 * hf, col = 64 * nh + 8 * nb + 2 * t4;
          const float2 sv =
              __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(setp + Smem::S + sw<D>(row, col)));
          acc[nh][4 * nb + 2 * hf] += gam * sv.x;
          acc[nh][4 * nb + 2 * hf + 1] += gam * sv.y;
        }
      gdn_mma::store_tile_bf16(dst + 64 * wg * D, D, as_frags(acc[nh]), 16 * wq, 64 * nh, 64, 1.f);
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

#ifndef DT_ATTN_EMU
cudaError_t launch_gdn_odd_states_wgmma(const KernelPolicy& pol, KIn k, float eps, const float* Gc,
                                        const int32_t* chunks, int nchunks, const void* states16,
                                        const GdnHalfStates& half, int64_t HK, int64_t HV, cudaStream_t s,
                                        const float* rk_kept) {
  if (k.t != KType::BF16 || !half.odd || !half.vnew || !half.chunk_off) return cudaErrorInvalidValue;
  const int64_t T = half.tokens;
  if (T <= 0 || !pol.hopper()) return cudaErrorNotSupported;
  if (nchunks < 2 || HV == 0) return cudaSuccess;
  const int64_t even = (int64_t(nchunks) + 1) / 2 * HV;  // slots of the kept (even) states
  OddMaps maps{};
  if (!tma::encode_image_map(maps.k, k.p, T, HK, C, true) ||
      !tma::encode_image_map(maps.V, half.vnew, T, HV, C, true) ||
      !tma::encode_image_map(maps.S, states16, even * D, 1, D, true))
    return cudaErrorNotSupported;
  cudaError_t e = set_launch_smem(pol, gdn_odd_states_wgmma_kernel, Smem::bytes);
  if (e != cudaSuccess) return e;
  const int sms = pol.sm_count;
  const int nitems = nchunks / 2 * static_cast<int>(HV);
  gdn_odd_states_wgmma_kernel<<<std::min(nitems, sms), NT, Smem::bytes, s>>>(
      maps, eps, Gc, chunks, static_cast<bf16*>(half.odd), HK, HV, half.chunk_off, half.nseq, nitems,
      rk_kept);
  return cudaGetLastError();
}
#endif

}  // namespace deltatune::kernels
