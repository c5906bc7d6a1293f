// Pieces shared by the wgmma preps (fwd_prep_wgmma.cu, lean_prep_wgmma.cu; device only): the producer warp's
// gates and chunk-local cumsum, the consumers' ρ from the q and k tiles, and operand-image stores.
#pragma once
#include <cstdint>

#include "common/device.cuh"
#include "common/mma.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"
#include "gdn/l2norm_row.cuh"
#include "gdn/wgmma_tiles.cuh"

namespace deltatune::kernels::gdn_prep {

// g and β of an item's rows lane, lane + 32 (zeros past the chunk's end), as the producer warp loads them one
// item ahead of their use.
struct RowGates {
  float g[2], beta[2];
};
__device__ __forceinline__ RowGates load_row_gates(const GdnGates& gates, const int32_t* chunks, int item,
                                                   int64_t HV) {
  RowGates r{};
  const int ch = item / static_cast<int>(HV), h = item % static_cast<int>(HV), lane = threadIdx.x & 31;
  const gdn_chunk::ChunkRef cr = gdn_chunk::chunk_at(chunks, ch);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = lane + 32 * rr;
    if (i < cr.len) {
      const int64_t o = (cr.t0 + i) * HV + h;
      r.g[rr] = gdn_g_at(gates, o, h);
      r.beta[rr] = gdn_beta_at(gates, o);
    }
  }
  return r;
}

// The producer warp: G = cumsum(g) (zeros past the chunk's end, one lane, in the mma.sync prep's order) and β
// into shared memory, and G into Gc (rows of chunk cr, value head h).
__device__ __forceinline__ void store_row_gates(float* G, float* B, const RowGates& r,
                                                const gdn_chunk::ChunkRef& cr, float* Gc, int64_t HV, int h) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) G[lane + 32 * rr] = r.g[rr], B[lane + 32 * rr] = r.beta[rr];
  __syncwarp();
  if (lane == 0) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < kGdnChunk / 4; ++q) {
      float4 y = reinterpret_cast<float4*>(G)[q];
      float* x = reinterpret_cast<float*>(&y);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s += x[e];
        x[e] = 4 * q + e < cr.len ? s : 0.f;
      }
      reinterpret_cast<float4*>(G)[q] = y;
    }
  }
  __syncwarp();
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = lane + 32 * rr;
    if (i < cr.len) Gc[(cr.t0 + i) * HV + h] = G[i];
  }
}

__device__ __forceinline__ float4 ld_bf16x4(const unsigned char* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// The consumers (256 threads): ρ_k, ρ_q of rows 8·warp .. + 7 of the 32-byte swizzled k and q tiles (lane
// columns 4·lane .. + 3, the L2 norm's sums: l2norm_row.cuh) into Rk, Rq, and s = β·e^G·ρ_k into Sv (zeros
// past the chunk's end); ρ also to nout (rows t0 .., key head hk) when `put`.
__device__ __forceinline__ void rows_rho(const unsigned char* Kt, const unsigned char* Qt, float scale,
                                         const GdnNormOut& nout, bool put, const float* G, const float* B,
                                         float* Rk, float* Rq, float* Sv, int len, int64_t t0, int64_t hk,
                                         int64_t HK) {
  constexpr int RW = kGdnChunk / 8;  // rows per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float4 kr[RW], qr[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int r = warp * RW + i;
    kr[i] = ld_bf16x4(Kt + gdn_wgmma::sw<kGdnChunk>(r, 4 * lane));
    qr[i] = ld_bf16x4(Qt + gdn_wgmma::sw<kGdnChunk>(r, 4 * lane));
  }
  float rk[RW], rq[RW];
  l2_rows_normalise(kr, 1.f, nout.eps, rk);
  l2_rows_normalise(qr, scale, nout.eps, rq);
  float a = 0.f, b = 0.f;  // lane i < RW: row warp·RW + i
#pragma unroll
  for (int i = 0; i < RW; ++i)
    if (lane == i) a = rk[i], b = rq[i];
  if (lane < RW) {
    const int r = warp * RW + lane;
    const bool ok = r < len;
    Rk[r] = ok ? a : 0.f, Rq[r] = ok ? b : 0.f;
    Sv[r] = ok ? B[r] * expf(G[r]) * a : 0.f;
    if (ok && put && nout.rq) {
      nout.rk[(t0 + r) * HK + hk] = a;
      nout.rq[(t0 + r) * HK + hk] = b;
    }
  }
}

// A warpgroup's accumulators (m64nN, N = R/2 columns from c0) as bf16 into a 64-row operand image tile in
// global memory (gdn_scan_image_index): the pairs of a row's 8-column group lie in one 16-byte run and the 8
// rows of a warp's quarter in 128 consecutive bytes, so each 4-byte store instruction writes whole lines.
template <int R>
__device__ __forceinline__ void store_image(__nv_bfloat16* tile, const float (&d)[R], int c0) {
  const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2);
  __nv_bfloat16* t =
      tile + gdn_scan_image_index(r0, c0 + 2 * (lane & 3));  // + 8·64 a column group, + 8·8 rows
#pragma unroll
  for (int nb = 0; nb < R / 4; ++nb)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      *reinterpret_cast<uint32_t*>(t + 8 * kGdnChunk * nb + 64 * hf) =
          gdn_wgmma::pack(d[4 * nb + 2 * hf], d[4 * nb + 2 * hf + 1]);
}

}  // namespace deltatune::kernels::gdn_prep
