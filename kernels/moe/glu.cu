// SwiGLU of the MoE experts on the gate_up GEMM's packed rows [gate | up] (I columns each): the forward reads
// gate and up from one [n, 2I] tensor and the backward writes dgate and dup into one, so the layer keeps the GEMM's
// output as it is and hands the dX GEMM its input as it is, without the two column copies each way (copy_cols,
// 0.57 ms a 35B-A3B step). Arithmetic per element as elementwise.cu's swiglu (same bits):
//   h (=) silu(g)·u;  dg (=) dh·u·silu'(g), du (=) dh·silu(g).
// bf16 rows of 8k values take 16-byte accesses (32-bit indices), anything else one element per iteration.
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void swiglu_packed_fwd_kernel(KIn gu, int64_t n, int64_t I, KOut h) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * I; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    st(h, i, siluf_(ld(gu, r * 2 * I + c)) * ld(gu, r * 2 * I + I + c));
  }
}
__global__ void swiglu_packed_bwd_kernel(KIn dh, KIn gu, int64_t n, int64_t I, KOut dgu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * I; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float gv = ld(gu, r * 2 * I + c), uv = ld(gu, r * 2 * I + I + c), dv = ld(dh, i);
    st(dgu, r * 2 * I + c, dv * uv * dsiluf_(gv));
    st(dgu, r * 2 * I + I + c, dv * siluf_(gv));
  }
}
// i8: 8-value group of h; I8 = I / 8 groups a row; n8 = n·I8 < 2^31.
__global__ void swiglu_packed_fwd_bf16x8_kernel(const void* gu, uint32_t I8, uint32_t n8, void* h) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
    const uint32_t r = i / I8, c = i - r * I8;
    const int64_t base = int64_t(r) * 2 * I8 + c;
    const Bf16x8 gv = ld8(gu, base), uv = ld8(gu, base + I8);
    Bf16x8 o;
#pragma unroll
    for (int k = 0; k < 8; ++k) o.v[k] = siluf_(gv.v[k]) * uv.v[k];
    st8(h, i, o);
  }
}
__global__ void swiglu_packed_bwd_bf16x8_kernel(const void* dh, const void* gu, uint32_t I8, uint32_t n8, void* dgu) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
    const uint32_t r = i / I8, c = i - r * I8;
    const int64_t base = int64_t(r) * 2 * I8 + c;
    const Bf16x8 dv = ld8(dh, i), gv = ld8(gu, base), uv = ld8(gu, base + I8);
    Bf16x8 rg, ru;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      rg.v[k] = dv.v[k] * uv.v[k] * dsiluf_(gv.v[k]);
      ru.v[k] = dv.v[k] * siluf_(gv.v[k]);
    }
    st8(dgu, base, rg);
    st8(dgu, base + I8, ru);
  }
}

bool vec8(int64_t n, int64_t I) { return I % 8 == 0 && n * (I / 8) < (int64_t(1) << 31); }

}  // namespace

cudaError_t launch_swiglu_packed_fwd(KIn gu, int64_t n, int64_t I, KOut h, cudaStream_t s) {
  if (n <= 0 || I <= 0) return cudaSuccess;
  if (vec8(n, I) && all_bf16x8(8, gu, h)) {
    const int64_t n8 = n * (I / 8);
    swiglu_packed_fwd_bf16x8_kernel<<<grid_for(n8, kThreads), kThreads, 0, s>>>(
        gu.p, static_cast<uint32_t>(I / 8), static_cast<uint32_t>(n8), h.p);
    return cudaGetLastError();
  }
  swiglu_packed_fwd_kernel<<<grid_for(n * I, kThreads), kThreads, 0, s>>>(gu, n, I, h);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_packed_bwd(KIn dh, KIn gu, int64_t n, int64_t I, KOut dgu, cudaStream_t s) {
  if (n <= 0 || I <= 0) return cudaSuccess;
  if (vec8(n, I) && all_bf16x8(8, dh, gu, dgu)) {
    const int64_t n8 = n * (I / 8);
    swiglu_packed_bwd_bf16x8_kernel<<<grid_for(n8, kThreads), kThreads, 0, s>>>(
        dh.p, gu.p, static_cast<uint32_t>(I / 8), static_cast<uint32_t>(n8), dgu.p);
    return cudaGetLastError();
  }
  swiglu_packed_bwd_kernel<<<grid_for(n * I, kThreads), kThreads, 0, s>>>(dh, gu, n, I, dgu);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
