// SwiGLU with the LoRA rank-r terms of its neighbours, r = 16, so that no rank-r term is written on its own:
//   forward:  h (=) silu(g + ag·ug·Bgᵀ) ⊙ (u + au·uu·Buᵀ) on the gate/up base products g, u (the sums written back
//             over g and u with keep_sums, for swiglu_bwd);
//   backward: dh' = dh + dr·A (the down projection's rank-r term of dx), dg (=) dh'·u·silu'(g), du (=) dh'·silu(g).
// Before, lora_up wrote each term in full and the base GEMM read it back (beta = 1); here the base GEMMs write
// their products alone and this kernel adds the terms while it reads them for SwiGLU.
// Layout: a block takes 128 tokens x 64 columns, and its g and u (and dh) tiles are copied to shared memory by
// cp.async with its u / dr rows and B / A columns, all issued at the start (72 / 74 KiB, three blocks an SM).
// Forward: each warp forms its 16 rows' rank-r products once (one mma k-step per 16 x 8 block), adds them to g and u
// in the mma layout (padded tile rows: the 4-byte reads fall on distinct banks), and forms h into a third tile; the
// warp's rows then go out as 16-byte row pieces. Backward: each warp sends its products through a per-warp fp32
// staging tile (lora_rank16_tile.cuh) and combines them with 16-byte row pieces of the tiles.
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
constexpr int kLdT = kCols + 8;  // padded rows of the forward's g / u / h tiles (mma-layout reads on distinct banks)

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The block's [128, 64] tile of a [T, N] bf16 tensor into dst (row stride ld); pieces past T or N become zeros.
__device__ __forceinline__ void load_tile(bf16* dst, int ld, const bf16* src, int64_t t0, int64_t n0, int64_t T,
                                          int64_t N) {
  for (int idx = threadIdx.x; idx < kTileT * (kCols / 8); idx += kThreads) {
    const int r = idx / (kCols / 8), q = idx % (kCols / 8);
    const bool ok = t0 + r < T && n0 + 8 * q < N;
    mma::cp_async16(mma::smem_addr(&dst[r * ld + 8 * q]), ok ? src + (t0 + r) * N + n0 + 8 * q : src, ok);
  }
}

struct BwdSmem {
  bf16 dh[kTileT * kCols], g[kTileT * kCols], u[kTileT * kCols];
  bf16 dr[kTileT * kLdA];
  bf16 a[kR * kLdN];
  float st[kThreads / 32][8 * kLdS];
};

struct FwdSmem {
  bf16 g[kTileT * kLdT], u[kTileT * kLdT], h[kTileT * kLdT];
  bf16 ug[kTileT * kLdA], uu[kTileT * kLdA];
  bf16 bg[kCols * kLdA], bu[kCols * kLdA];
};

// This lane's sums of one rank-r product with its base product, in the mma layout: acc[nb][2·hf + e] belongs to
// tile row r0 + 8·hf, column 8·nb + 2·t4 + e. Each sum alpha·acc + base is rounded to bf16 once, as the staged
// forward did (no fused multiply-add: __fmul_rn / __fadd_rn), and written back over the base with keep.
__device__ __forceinline__ void sums(const float (&acc)[kHalf / 8][4], float alpha, bf16* tile, int r0, int t4,
                                     bool keep, float (&out)[kHalf / 8][4]) {
#pragma unroll
  for (int nb = 0; nb < kHalf / 8; ++nb)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      auto* p = reinterpret_cast<__nv_bfloat162*>(&tile[(r0 + 8 * hf) * kLdT + nb * 8 + 2 * t4]);
      const float2 b = __bfloat1622float2(*p);
      out[nb][2 * hf] = round_bf16(__fadd_rn(__fmul_rn(alpha, acc[nb][2 * hf]), b.x));
      out[nb][2 * hf + 1] = round_bf16(__fadd_rn(__fmul_rn(alpha, acc[nb][2 * hf + 1]), b.y));
      if (keep) *p = __floats2bfloat162_rn(out[nb][2 * hf], out[nb][2 * hf + 1]);
    }
}

__global__ void __launch_bounds__(kThreads, 3)
    lora_swiglu_fwd_kernel(const bf16* __restrict__ ug, int64_t ldug, const bf16* __restrict__ uu, int64_t lduu,
                           const bf16* __restrict__ Bg, const bf16* __restrict__ Bu, float ag, float au,
                           bf16* __restrict__ g, bf16* __restrict__ u, bf16* __restrict__ h, int64_t T, int64_t N,
                           bool keep_sums) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  FwdSmem& sm = *reinterpret_cast<FwdSmem*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kCols;
  load_tile(sm.g, kLdT, g, t0, n0, T, N);
  load_tile(sm.u, kLdT, u, t0, n0, T, N);
  load_r16(sm.ug, ug, ldug, t0, T);
  load_r16(sm.uu, uu, lduu, t0, T);
  load_r16<kCols>(sm.bg, Bg, kR, n0, N);
  load_r16<kCols>(sm.bu, Bu, kR, n0, N);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  const int r0 = 16 * warp + lane / 4, t4 = lane % 4;
  float gs[kHalf / 8][4], us[kHalf / 8][4];
  {
    uint32_t a[4];
    float acc[kHalf / 8][4];
    mma::ldsm_x4(a, mma::smem_addr(&sm.ug[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
    rank_r_nk(acc, a, sm.bg, 0, lane);
    sums(acc, ag, sm.g, r0, t4, keep_sums, gs);
    mma::ldsm_x4(a, mma::smem_addr(&sm.uu[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
    rank_r_nk(acc, a, sm.bu, 0, lane);
    sums(acc, au, sm.u, r0, t4, keep_sums, us);
  }
#pragma unroll
  for (int nb = 0; nb < kHalf / 8; ++nb)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      *reinterpret_cast<__nv_bfloat162*>(&sm.h[(r0 + 8 * hf) * kLdT + nb * 8 + 2 * t4]) =
          __floats2bfloat162_rn(siluf_(gs[nb][2 * hf]) * us[nb][2 * hf],
                                siluf_(gs[nb][2 * hf + 1]) * us[nb][2 * hf + 1]);
  __syncwarp();
  // The warp's 16 rows x 64 columns out as 16-byte row pieces: h, and the sums with keep_sums.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = 16 * warp + 4 * i + lane / 8, c = 8 * (lane % 8);
    const int64_t t = t0 + r, n = n0 + c;
    if (t >= T || n >= N) continue;
    const int64_t off = t * N + n;
    *reinterpret_cast<uint4*>(h + off) = *reinterpret_cast<const uint4*>(&sm.h[r * kLdT + c]);
    if (keep_sums) {
      *reinterpret_cast<uint4*>(g + off) = *reinterpret_cast<const uint4*>(&sm.g[r * kLdT + c]);
      *reinterpret_cast<uint4*>(u + off) = *reinterpret_cast<const uint4*>(&sm.u[r * kLdT + c]);
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
  load_tile(sm.dh, kCols, dh, t0, n0, T, N);
  load_tile(sm.g, kCols, g, t0, n0, T, N);
  load_tile(sm.u, kCols, u, t0, n0, T, N);
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
  const size_t smem = sizeof(FwdSmem);
  if (const cudaError_t e = opt_in(lora_swiglu_fwd_kernel, smem); e != cudaSuccess) return e;
  lora_swiglu_fwd_kernel<<<grid_of(a.T, a.N), kThreads, smem, s>>>(
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
