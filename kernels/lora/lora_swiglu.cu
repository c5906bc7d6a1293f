// SwiGLU with the LoRA rank-r terms of its neighbours, r = 16, so that no rank-r term is written on its own:
//   forward:  h (=) silu(g + ag·ug·Bgᵀ) ⊙ (u + au·uu·Buᵀ) on the gate/up base products g, u (the sums written back
//             over g and u with keep_sums, for swiglu_bwd);
//   backward: dh' = dh + dr·A (the down projection's rank-r term of dx), dg (=) dh'·u·silu'(g), du (=) dh'·silu(g).
// Before, lora_up wrote each term in full and the base GEMM read it back (beta = 1); here the base GEMMs write
// their products alone and this kernel adds the terms while it reads them for SwiGLU.
// Forward, lora_up.cu's layout: a block takes 128 tokens x 128 columns with its u rows and B columns in shared
// memory; each warp forms 16 tokens x 64 columns per pass with one mma k-step per 16 x 8 block and sends them
// through a per-warp fp32 staging tile, so every global access is a 16-byte row piece of 8 columns. Backward: a
// block takes 128 tokens x 64 columns, and its dh, g and u tiles are copied to shared memory by cp.async with its
// dr rows and A columns, all issued at the start (74 KiB, three blocks an SM), then formed as the forward does.
// Arithmetic per element as the ops it replaces: each sum rounded to bf16 once (a GEMM with beta = 1 into the base
// product rounds the same way), SwiGLU on the rounded sums in fp32 (swiglu_fwd / swiglu_bwd).
#include <cuda_bf16.h>

#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "common/mma.cuh"
#include "lora/lora.cuh"
#include "lora/lora_rank16_tile.cuh"

namespace deltatune::kernels {
namespace {

using namespace lora_rank16;
constexpr int kCols = kHalf;     // columns per backward block
constexpr int kLdN = kCols + 8;  // padded A rows [r][64 columns]

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The block's [128, 64] tile of a [T, N] bf16 tensor into dst (row stride kCols); pieces past T or N become zeros.
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t t0, int64_t n0, int64_t T, int64_t N) {
  for (int idx = threadIdx.x; idx < kTileT * (kCols / 8); idx += kThreads) {
    const int r = idx / (kCols / 8), q = idx % (kCols / 8);
    const bool ok = t0 + r < T && n0 + 8 * q < N;
    mma::cp_async16(mma::smem_addr(&dst[r * kCols + 8 * q]), ok ? src + (t0 + r) * N + n0 + 8 * q : src, ok);
  }
}

struct BwdSmem {
  bf16 dh[kTileT * kCols], g[kTileT * kCols], u[kTileT * kCols];
  bf16 dr[kTileT * kLdA];
  bf16 a[kR * kLdN];
  float st[kThreads / 32][8 * kLdS];
};

__global__ void __launch_bounds__(kThreads, 2)
    lora_swiglu_fwd_kernel(const bf16* __restrict__ ug, int64_t ldug, const bf16* __restrict__ uu, int64_t lduu,
                           const bf16* __restrict__ Bg, const bf16* __restrict__ Bu, float ag, float au,
                           bf16* __restrict__ g, bf16* __restrict__ u, bf16* __restrict__ h, int64_t T, int64_t N,
                           bool keep_sums) {
  __shared__ __align__(16) bf16 ugs[kTileT * kLdA];
  __shared__ __align__(16) bf16 uus[kTileT * kLdA];
  __shared__ __align__(16) bf16 bgs[kTileN * kLdA];
  __shared__ __align__(16) bf16 bus[kTileN * kLdA];
  __shared__ __align__(16) float st[kThreads / 32][8 * kLdS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kTileN;
  load_r16(ugs, ug, ldug, t0, T);
  load_r16(uus, uu, lduu, t0, T);
  load_r16(bgs, Bg, kR, n0, N);
  load_r16(bus, Bu, kR, n0, N);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  uint32_t a_g[4], a_u[4];
  mma::ldsm_x4(a_g, mma::smem_addr(&ugs[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
  mma::ldsm_x4(a_u, mma::smem_addr(&uus[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
  float* s = st[warp];
#pragma unroll 1
  for (int hc = 0; hc < kTileN / kHalf; ++hc) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // rows g (c0, c1), then g + 8 (c2, c3) of the mma blocks
      // This lane's two row pieces of g and u, loaded before the rank-r products so the reads are in flight.
      int64_t off[2];
      bool in[2];
      uint4 graw[2], uraw[2];
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
        const int64_t t = t0 + 16 * warp + 8 * half + pass * 4 + lane / 8, n = n0 + hc * kHalf + 8 * (lane % 8);
        in[pass] = t < T && n < N;
        off[pass] = t * N + n;
        if (in[pass]) {
          graw[pass] = *reinterpret_cast<const uint4*>(g + off[pass]);
          uraw[pass] = *reinterpret_cast<const uint4*>(u + off[pass]);
        }
      }
      float lg[2][8], lu[2][8];
      {
        float acc[kHalf / 8][4];
        rank_r_nk(acc, a_g, bgs, hc * kHalf, lane);
        stage_rows(acc, ag, half, s, lane, lg);
        rank_r_nk(acc, a_u, bus, hc * kHalf, lane);
        stage_rows(acc, au, half, s, lane, lu);
      }
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
        if (!in[pass]) continue;
        const Bf16x8 g0 = ld8(&graw[pass], 0), u0 = ld8(&uraw[pass], 0);
        Bf16x8 gs, us, hv;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          gs.v[k] = round_bf16(lg[pass][k] + g0.v[k]);
          us.v[k] = round_bf16(lu[pass][k] + u0.v[k]);
          hv.v[k] = siluf_(gs.v[k]) * us.v[k];
        }
        st8(h + off[pass], 0, hv);
        if (keep_sums) {
          st8(g + off[pass], 0, gs);
          st8(u + off[pass], 0, us);
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 3)
    lora_swiglu_bwd_kernel(const bf16* __restrict__ dh, const bf16* __restrict__ dr, const bf16* __restrict__ A,
                           const bf16* __restrict__ g, const bf16* __restrict__ u, bf16* __restrict__ dg,
                           bf16* __restrict__ du, int64_t T, int64_t N) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  BwdSmem& sm = *reinterpret_cast<BwdSmem*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kCols;
  load_tile(sm.dh, dh, t0, n0, T, N);
  load_tile(sm.g, g, t0, n0, T, N);
  load_tile(sm.u, u, t0, n0, T, N);
  load_r16(sm.dr, dr, kR, t0, T);
  if (threadIdx.x < kR * (kCols / 8)) {  // A [16, N] columns n0 .. n0 + 63: 16 rows x 8 pieces of 8
    const int k = threadIdx.x / (kCols / 8), q = threadIdx.x % (kCols / 8);
    const bool ok = n0 + 8 * q < N;
    mma::cp_async16(mma::smem_addr(&sm.a[k * kLdN + 8 * q]), ok ? A + k * N + n0 + 8 * q : A, ok);
  }
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  uint32_t a[4];
  mma::ldsm_x4(a, mma::smem_addr(&sm.dr[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
  float* s = sm.st[warp];
  float acc[kHalf / 8][4];
#pragma unroll
  for (int p = 0; p < kHalf / 16; ++p) {  // A tile as [k][n] rows: the transposed loads give the col-major B
    uint32_t b[4];
    mma::ldsm_x4_t(b, mma::smem_addr(&sm.a[(lane & 15) * kLdN + 16 * p + (lane >> 4) * 8]));
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[2 * p][e] = acc[2 * p + 1][e] = 0.f;
    mma::mma16816(acc[2 * p], a, b[0], b[1]);
    mma::mma16816(acc[2 * p + 1], a, b[2], b[3]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l[2][8];
    stage_rows(acc, 1.f, half, s, lane, l);
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int r = 16 * warp + 8 * half + pass * 4 + lane / 8, c = 8 * (lane % 8);
      const int64_t t = t0 + r, n = n0 + c;
      if (t >= T || n >= N) continue;
      const Bf16x8 d0 = ld8(&sm.dh[r * kCols + c], 0), gv = ld8(&sm.g[r * kCols + c], 0),
                   uv = ld8(&sm.u[r * kCols + c], 0);
      Bf16x8 rg, ru;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float dv = round_bf16(l[pass][k] + d0.v[k]);
        rg.v[k] = dv * uv.v[k] * dsiluf_(gv.v[k]);
        ru.v[k] = dv * siluf_(gv.v[k]);
      }
      const int64_t off = t * N + n;
      st8(dg + off, 0, rg);
      st8(du + off, 0, ru);
    }
  }
}

// Dynamic shared memory above the 48 KiB default: the opt-in is per device, so it is set at every launch (a
// host-side attribute, not a stream operation), with the carveout at its most so that three blocks fit an SM.
template <class Kernel>
cudaError_t opt_in(Kernel kernel, size_t smem) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  return e;
}

dim3 grid_of(int64_t T, int64_t N) {
  return dim3(static_cast<unsigned>((N + kCols - 1) / kCols), static_cast<unsigned>((T + kTileT - 1) / kTileT));
}

bool al16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool lora_swiglu_fwd_takes(const LoraSwigluArgs& a) {
  return a.rg == kR && a.ru == kR && a.T > 0 && a.N > 0 && a.N % 8 == 0 && a.ldug % 8 == 0 && a.lduu % 8 == 0 &&
         al16(a.ug) && al16(a.uu) && al16(a.Bg) && al16(a.Bu) && al16(a.g) && al16(a.u) && al16(a.h);
}

cudaError_t launch_lora_swiglu_fwd(const LoraSwigluArgs& a, cudaStream_t s) {
  if (!lora_swiglu_fwd_takes(a)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((a.N + kTileN - 1) / kTileN), static_cast<unsigned>((a.T + kTileT - 1) / kTileT));
  lora_swiglu_fwd_kernel<<<grid, kThreads, 0, s>>>(
      static_cast<const bf16*>(a.ug), a.ldug, static_cast<const bf16*>(a.uu), a.lduu, static_cast<const bf16*>(a.Bg),
      static_cast<const bf16*>(a.Bu), a.ag, a.au, static_cast<bf16*>(a.g), static_cast<bf16*>(a.u),
      static_cast<bf16*>(a.h), a.T, a.N, a.keep_sums);
  return cudaGetLastError();
}

bool lora_swiglu_bwd_takes(const LoraSwigluBwdArgs& a) {
  return a.r == kR && a.T > 0 && a.N > 0 && a.N % 8 == 0 && al16(a.dh) && al16(a.dr) && al16(a.A) && al16(a.g) &&
         al16(a.u) && al16(a.dg) && al16(a.du);
}

cudaError_t launch_lora_swiglu_bwd(const LoraSwigluBwdArgs& a, cudaStream_t s) {
  if (!lora_swiglu_bwd_takes(a)) return cudaErrorInvalidValue;
  const size_t smem = sizeof(BwdSmem);
  if (const cudaError_t e = opt_in(lora_swiglu_bwd_kernel, smem); e != cudaSuccess) return e;
  lora_swiglu_bwd_kernel<<<grid_of(a.T, a.N), kThreads, smem, s>>>(
      static_cast<const bf16*>(a.dh), static_cast<const bf16*>(a.dr), static_cast<const bf16*>(a.A),
      static_cast<const bf16*>(a.g), static_cast<const bf16*>(a.u), static_cast<bf16*>(a.dg), static_cast<bf16*>(a.du),
      a.T, a.N);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
