// Gated RMSNorm of the GDN output (spec §3.3, §3.10), rows of length n = dv, fp32 math; bf16 rows with n % 8 == 0
// on lane groups (rows8.cuh: 16 lanes per 128-value row), others one block per row.
//   forward:  r = 1/sqrt(mean(x²) + eps), x̂ = x·r;  y (=) x̂·w·silu(z);  rstd (=) r
//   backward: dz (=) dy·x̂·w·silu'(z);  dx̂ = dy·silu(z)·w;  dx (=) r·(dx̂ − x̂·mean(dx̂·x̂))
// (The whole product is formed in fp32 before one cast, as FLA's fused kernel does.)
#include "common/device.cuh"
#include "norm/norm.cuh"
#include "norm/rows8.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void gated_rmsnorm_fwd_kernel(KIn x, KIn z, KIn w, float eps, KOut y, float* rstd, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = rsqrtf(ss / float(n) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    st(y, base + c, ld(x, base + c) * r * ld(w, c) * siluf_(ld(z, base + c)));
}

__global__ void gated_rmsnorm_bwd_kernel(KIn dy, KIn x, KIn z, KIn w, const float* rstd, KOut dx, KOut dz,
                                         int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xh = ld(x, base + c) * r, zv = ld(z, base + c), g = ld(dy, base + c), wv = ld(w, c);
    dot += g * siluf_(zv) * wv * xh;
    st(dz, base + c, g * xh * wv * dsiluf_(zv));
  }
  const float mean = block_sum(dot, scratch) / float(n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xh = ld(x, base + c) * r;
    const float dxh = ld(dy, base + c) * siluf_(ld(z, base + c)) * ld(w, c);
    st(dx, base + c, r * (dxh - xh * mean));
  }
}

// z is loaded with x, before the row's reduction, both operands' loads in flight together, held packed (z read in
// the output pass, after the shuffles, cost a second memory latency a row: 19.1 -> 17.2 us at [65536, 128] in
// isolation, 18.7 -> 17.4 us in the 2b step, session 33).
template <int L, int CH, bool WF>
__global__ void __launch_bounds__(kRows8Threads) gated_rmsnorm_fwd_rows8_kernel(const void* x, const void* z, KIn w,
                                                                                float eps, void* y, float* rstd,
                                                                                int64_t rows, int n8) {
  const RowLane<L> rl(rows);
  uint4 xv[CH], zv[CH];
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (rl.valid && j < n8) zv[k] = ld8_raw(z, rl.row * n8 + j);
  }
  const float r = rsqrtf(load_row_sumsq<L, CH>(x, rl, n8, n8, xv) / float(8 * n8) + eps);
  if (!rl.valid) return;
  if (rl.lane == 0) rstd[rl.row] = r;
  opaque(xv);
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (j >= n8) continue;
    const Bf16x8 xk = unpack8(xv[k]), zk = unpack8(zv[k]);
    Bf16x8 out;
    float wv[8];
    w8<WF>(w, j, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) out.v[e] = xk.v[e] * r * wv[e] * siluf_(zk.v[e]);
    st8(y, rl.row * n8 + j, out);
  }
}

template <int L, int CH, bool WF>
__global__ void __launch_bounds__(kRows8Threads)
    gated_rmsnorm_bwd_rows8_kernel(const void* dy, const void* x, const void* z, KIn w, const float* rstd, void* dx,
                                   void* dz, int64_t rows, int n8) {
  const RowLane<L> rl(rows);
  const float r = rl.valid ? rstd[rl.row] : 0.f;
  Bf16x8 xh[CH], gs[CH];  // x̂, and dy·silu(z)·w (= dx̂)
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (!rl.valid || j >= n8) continue;
    const Bf16x8 xv = ld8(x, rl.row * n8 + j), zv = ld8(z, rl.row * n8 + j), gv = ld8(dy, rl.row * n8 + j);
    Bf16x8 dzv;
    float w8v[8];
    w8<WF>(w, j, w8v);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float wv = w8v[e];
      xh[k].v[e] = xv.v[e] * r;
      gs[k].v[e] = gv.v[e] * siluf_(zv.v[e]) * wv;
      dot += gs[k].v[e] * xh[k].v[e];
      dzv.v[e] = gv.v[e] * xh[k].v[e] * wv * dsiluf_(zv.v[e]);
    }
    st8(dz, rl.row * n8 + j, dzv);
  }
  const float mean = group_sum<L>(dot) / float(8 * n8);
  if (!rl.valid) return;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (j >= n8) continue;
    Bf16x8 out;
#pragma unroll
    for (int e = 0; e < 8; ++e) out.v[e] = r * (gs[k].v[e] - xh[k].v[e] * mean);
    st8(dx, rl.row * n8 + j, out);
  }
}

}  // namespace

cudaError_t launch_gated_rmsnorm_fwd(KIn x, KIn z, KIn w, float eps, KOut y, float* rstd, int64_t rows, int64_t n,
                                     cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (all_bf16x8(n, x, z, KIn{y.p, y.t}) &&
      dispatch_rows8(rows, n, [&](auto L, auto CH, unsigned grid) {
        const int n8 = static_cast<int>(n / 8);
        if (weight_f32x4(w))
          gated_rmsnorm_fwd_rows8_kernel<L.value, CH.value, true><<<grid, kRows8Threads, 0, s>>>(x.p, z.p, w, eps, y.p,
                                                                                                rstd, rows, n8);
        else
          gated_rmsnorm_fwd_rows8_kernel<L.value, CH.value, false><<<grid, kRows8Threads, 0, s>>>(x.p, z.p, w, eps,
                                                                                                 y.p, rstd, rows, n8);
      }))
    return cudaGetLastError();
  gated_rmsnorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, z, w, eps, y, rstd, n);
  return cudaGetLastError();
}
cudaError_t launch_gated_rmsnorm_bwd(KIn dy, KIn x, KIn z, KIn w, const float* rstd, KOut dx, KOut dz, int64_t rows,
                                     int64_t n, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (all_bf16x8(n, dy, x, z, KIn{dx.p, dx.t}, KIn{dz.p, dz.t}) &&
      dispatch_rows8(rows, n, [&](auto L, auto CH, unsigned grid) {
        const int n8 = static_cast<int>(n / 8);
        if (weight_f32x4(w))
          gated_rmsnorm_bwd_rows8_kernel<L.value, CH.value, true><<<grid, kRows8Threads, 0, s>>>(
              dy.p, x.p, z.p, w, rstd, dx.p, dz.p, rows, n8);
        else
          gated_rmsnorm_bwd_rows8_kernel<L.value, CH.value, false><<<grid, kRows8Threads, 0, s>>>(
              dy.p, x.p, z.p, w, rstd, dx.p, dz.p, rows, n8);
      }))
    return cudaGetLastError();
  gated_rmsnorm_bwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, z, w, rstd, dx, dz, n);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
