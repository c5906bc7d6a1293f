// ρ_k, ρ_q of a chunk's 64 k and 64 q rows in the wgmma forward prep (fwd_prep_wgmma.cu; device only) with
// two threads a row instead of a warp a row: the same sums in the same order as the L2 norm's lanes and
// butterfly (l2norm_row.cuh), so ρ is bit-identical, but 1 shuffle a row instead of 5 a row per lane.
//
// The L2 norm holds lane l's 4 values (columns 4l .. 4l + 3) and sums them in order (l2_lane_sumsq), then
// adds the other lanes' sums by xor 16, 8, 4, 2, 1 (every lane ends with the same value: a + b = b + a). The
// first four steps never mix lanes of different parity, so thread hb of a row's pair forms, from the 16
// lanes l ≡ hb (mod 2), what lane hb holds before the last step, and the pair adds the two by one shuffle.
#pragma once
#include <cstdint>

#include "common/device.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/l2norm_row.cuh"
#include "gdn/prep_wgmma.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels::gdn_prep {

// Σ x² of one row of a 32-byte swizzled 64-row tile as the L2 norm's lanes l ≡ hb (mod 2) and butterfly steps
// 16, 8, 4, 2 leave it in lane hb.
__device__ __forceinline__ float row_half_sumsq(const unsigned char* tile, int r, int hb) {
  float s[16];  // lane 2j + hb: columns 8j + 4hb .. + 3
#pragma unroll
  for (int j = 0; j < 16; ++j) s[j] = l2_lane_sumsq(ld_bf16x4(tile + gdn_wgmma::sw<kGdnChunk>(r, 8 * j + 4 * hb)));
  // xor 16: lane l (< 16) + lane l + 16, i.e. j + j + 8; xor 8: j + j + 4; xor 4: j + j + 2; xor 2: j + j + 1
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] += s[j + 8];
#pragma unroll
  for (int j = 0; j < 4; ++j) s[j] += s[j + 4];
#pragma unroll
  for (int j = 0; j < 2; ++j) s[j] += s[j + 2];
  return s[0] + s[1];
}

// The 256 consumer threads: threads 2r, 2r + 1 (r < 64) row r of k, threads 128 + 2r, + 1 row r of q; ρ into
// Rk, Rq and s = β·e^G·ρ_k into Sv (zeros past the chunk's end), ρ also to nout (rows t0 .., key head hk) when
// `put` — rows_rho's outputs and arithmetic (prep_wgmma.cuh).
__device__ __forceinline__ void rows_rho_pairs(const unsigned char* Kt, const unsigned char* Qt,
                                               const GdnNormOut& nout, bool put, const float* G, const float* B,
                                               float* Rk, float* Rq, float* Sv, int len, int64_t t0, int64_t hk,
                                               int64_t HK) {
  const int t = threadIdx.x, hb = t & 1, r = (t >> 1) & (kGdnChunk - 1);
  const bool isq = t >= 2 * kGdnChunk;
  const float h = row_half_sumsq(isq ? Qt : Kt, r, hb);
  const float rho = rsqrtf(h + __shfl_xor_sync(0xffffffffu, h, 1) + nout.eps);
  if (hb == 0) {
    const bool ok = r < len;
    if (isq) {
      Rq[r] = ok ? rho : 0.f;
      if (ok && put && nout.rq) nout.rq[(t0 + r) * HK + hk] = rho;
    } else {
      Rk[r] = ok ? rho : 0.f;
      Sv[r] = ok ? B[r] * expf(G[r]) * rho : 0.f;
      if (ok && put && nout.rq) nout.rk[(t0 + r) * HK + hk] = rho;
    }
  }
}

}  // namespace deltatune::kernels::gdn_prep
