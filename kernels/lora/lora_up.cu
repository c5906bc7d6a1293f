// The rank-r term of a LoRA forward, y (=) alpha·u·Bᵀ (+ res), r = 16 (u [T, 16] the forward's x·Aᵀ, B [N, 16]):
// one mma k-step per 16 x 8 output block, so the kernel is the write of y (and the read of res). cuBLAS ran it at
// ~2.4 TB/s; with res it also replaces the copy of the residual stream that the output projections added into.
// A block takes 128 tokens x 128 columns with its u and B rows in shared memory; each warp forms 16 tokens x 64
// columns at a time and sends them through a per-warp fp32 staging tile out as 16-byte row pieces, adding res's
// piece in fp32 before the one rounding (as a GEMM with beta = 1 into a copy of res rounds).
#include <cuda_bf16.h>

#include "common/device.cuh"
#include "common/mma.cuh"
#include "lora/lora.cuh"
#include "lora/lora_rank16_tile.cuh"

namespace deltatune::kernels {
namespace {

using namespace lora_rank16;

__global__ void __launch_bounds__(kThreads)
    lora_up_kernel(const bf16* __restrict__ u, int64_t ldu, const bf16* __restrict__ B, float alpha,
                   const bf16* res, int64_t ldres, bf16* y, int64_t ldy, int64_t T, int64_t N) {
  __shared__ __align__(16) bf16 us[kTileT * kLdA];
  __shared__ __align__(16) bf16 bs[kTileN * kLdA];
  __shared__ __align__(16) float st[kThreads / 32][8 * kLdS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kTileN;
  load_r16(us, u, ldu, t0, T);
  load_r16(bs, B, kR, n0, N);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  uint32_t a[4];
  mma::ldsm_x4(a, mma::smem_addr(&us[(16 * warp + (lane & 15)) * kLdA + (lane >> 4) * 8]));
  float* s = st[warp];
#pragma unroll
  for (int h = 0; h < kTileN / kHalf; ++h) {
    float acc[kHalf / 8][4];
    rank_r_nk(acc, a, bs, h * kHalf, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // rows g (c0, c1), then g + 8 (c2, c3)
      float v[2][8];
      stage_rows(acc, alpha, half, s, lane, v);
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
        const int64_t t = t0 + 16 * warp + 8 * half + pass * 4 + lane / 8, n = n0 + h * kHalf + 8 * (lane % 8);
        if (t < T && n < N) {
          if (res) {
            const uint4 raw = *reinterpret_cast<const uint4*>(res + t * ldres + n);
            const auto* rh = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const float2 f = __bfloat1622float2(rh[k]);
              v[pass][2 * k] += f.x, v[pass][2 * k + 1] += f.y;
            }
          }
          uint4 out;
          auto* oh = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
          for (int k = 0; k < 4; ++k) oh[k] = __floats2bfloat162_rn(v[pass][2 * k], v[pass][2 * k + 1]);
          *reinterpret_cast<uint4*>(y + t * ldy + n) = out;
        }
      }
    }
  }
}

}  // namespace

bool lora_up_takes(const LoraUpArgs& a) {
  auto al16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.r == kR && a.T > 0 && a.N > 0 && a.N % 8 == 0 && a.ldu % 8 == 0 && a.ldy % 8 == 0 && al16(a.u) &&
         al16(a.B) && al16(a.y) && (a.res == nullptr || (a.ldres % 8 == 0 && al16(a.res)));
}

cudaError_t launch_lora_up(const LoraUpArgs& a, cudaStream_t s) {
  if (!lora_up_takes(a)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((a.N + kTileN - 1) / kTileN), static_cast<unsigned>((a.T + kTileT - 1) / kTileT));
  lora_up_kernel<<<grid, kThreads, 0, s>>>(static_cast<const bf16*>(a.u), a.ldu, static_cast<const bf16*>(a.B),
                                           a.alpha, static_cast<const bf16*>(a.res), a.ldres,
                                           static_cast<bf16*>(a.y), a.ldy, a.T, a.N);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
