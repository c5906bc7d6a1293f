// RMSNorm over rows of length n (spec §3.3, §3.10), one block per row, fp32 math.
//   forward:  r = 1/sqrt(mean(x²) + eps);  y (=) x·r·w'   with w' = 1 + w (zero-centred) or w;  rstd (=) r
//   backward: x̂ = x·r, dx̂ = dy·w';  dx (=) r·(dx̂ − x̂·mean(dx̂·x̂))
// Memory: bf16 rows (n % 8 == 0, n <= 4096) are read once into registers (rows8.cuh); otherwise one block per row
// reads each row twice (reduction pass, then output pass).
// The row operand x (and the forward's y, the backward's dx) may have rows ld values apart, wider than n: the
// attention block's q is read, and its gradient written, in place in q_proj's [q | gate] rows (no column copies).
#include "common/device.cuh"
#include "norm/norm.cuh"
#include "norm/rows8.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void rmsnorm_fwd_kernel(KIn x, int64_t ldx, KIn w, float eps, bool zc, KOut y, int64_t ldy, float* rstd,
                                   int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * ldx, ybase = blockIdx.x * ldy;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = rsqrtf(ss / float(n) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    st(y, ybase + c, ld(x, base + c) * r * wv);
  }
}

__global__ void rmsnorm_bwd_kernel(KIn dy, KIn x, int64_t ldx, KIn w, const float* rstd, bool zc, KOut dx,
                                   int64_t ldd, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n, xbase = blockIdx.x * ldx, dbase = blockIdx.x * ldd;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    dot += ld(dy, base + c) * wv * ld(x, xbase + c) * r;
  }
  const float mean = block_sum(dot, scratch) / float(n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float wv = zc ? 1.f + ld(w, c) : ld(w, c);
    const float xh = ld(x, xbase + c) * r;
    st(dx, dbase + c, r * (ld(dy, base + c) * wv - xh * mean));
  }
}

template <int L, int CH, bool WF>
__global__ void __launch_bounds__(kRows8Threads)
    rmsnorm_fwd_rows8_kernel(const void* x, int64_t ldx8, KIn w, float eps, bool zc, void* y, int64_t ldy8, float* rstd,
                             int64_t rows, int n8) {
  const RowLane<L> rl(rows);
  constexpr bool reread = kRereadRows<CH>;
  Bf16x8 xv[reread ? 1 : CH];
  const float ss =
      reread ? row_sumsq<L, CH>(x, rl, n8, ldx8) : load_row_sumsq<L, reread ? 1 : CH>(x, rl, n8, ldx8, xv);
  const float r = rsqrtf(ss / float(8 * n8) + eps);
  if (!rl.valid) return;
  if (rl.lane == 0) rstd[rl.row] = r;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (j >= n8) continue;
    const Bf16x8 xk = reread ? ld8(x, rl.row * ldx8 + j) : xv[reread ? 0 : k];
    Bf16x8 out;
    float wv[8];
    w8<WF>(w, j, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) out.v[e] = xk.v[e] * r * (zc ? 1.f + wv[e] : wv[e]);
    st8(y, rl.row * ldy8 + j, out);
  }
}

// RES: dx (=) bf16(the gradient) + residual, rounded again (as rmsnorm_bwd then add(dx, residual) would).
template <int L, int CH, bool WF, bool RES>
__global__ void __launch_bounds__(kRows8Threads)
    rmsnorm_bwd_rows8_kernel(const void* dy, const void* x, int64_t ldx8, KIn w, const float* rstd, bool zc,
                             const void* residual, void* dx, int64_t ldd8, int64_t rows, int n8) {
  const RowLane<L> rl(rows);
  const float r = rl.valid ? rstd[rl.row] : 0.f;
  constexpr bool reread = kRereadRows<CH>;
  constexpr int held = reread ? 1 : CH;
  Bf16x8 xv[held], gv[held];
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (!rl.valid || j >= n8) continue;
    const int h = reread ? 0 : k;
    xv[h] = ld8(x, rl.row * ldx8 + j);
    gv[h] = ld8(dy, rl.row * n8 + j);
    float wv[8];
    w8<WF>(w, j, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) dot += gv[h].v[e] * (zc ? 1.f + wv[e] : wv[e]) * xv[h].v[e] * r;
  }
  const float mean = group_sum<L>(dot) / float(8 * n8);
  if (!rl.valid) return;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (j >= n8) continue;
    const int h = reread ? 0 : k;
    if (reread) {
      xv[h] = ld8(x, rl.row * ldx8 + j);
      gv[h] = ld8(dy, rl.row * n8 + j);
    }
    Bf16x8 out;
    float wv[8];
    w8<WF>(w, j, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) out.v[e] = r * (gv[h].v[e] * (zc ? 1.f + wv[e] : wv[e]) - xv[h].v[e] * r * mean);
    if constexpr (RES) {
      const Bf16x8 res = ld8(residual, rl.row * n8 + j);
#pragma unroll
      for (int e = 0; e < 8; ++e) out.v[e] = __bfloat162float(__float2bfloat16_rn(out.v[e])) + res.v[e];
    }
    st8(dx, rl.row * ldd8 + j, out);
  }
}

}  // namespace

cudaError_t launch_rmsnorm_fwd(KIn x, KIn w, float eps, bool zc, KOut y, float* rstd, int64_t rows, int64_t n,
                               cudaStream_t s) {
  return launch_rmsnorm_fwd_ld(x, n, w, eps, zc, y, n, rstd, rows, n, s);
}
cudaError_t launch_rmsnorm_fwd_ld(KIn x, int64_t ldx, KIn w, float eps, bool zc, KOut y, int64_t ldy, float* rstd,
                                  int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (ldx < n || ldy < n) return cudaErrorInvalidValue;
  if (all_bf16x8(n, x, KIn{y.p, y.t}) && (ldx | ldy) % 8 == 0 &&
      dispatch_rows8(rows, n, [&](auto L, auto CH, unsigned grid) {
        const int n8 = static_cast<int>(n / 8);
        if (weight_f32x4(w))
          rmsnorm_fwd_rows8_kernel<L.value, CH.value, true>
              <<<grid, kRows8Threads, 0, s>>>(x.p, ldx / 8, w, eps, zc, y.p, ldy / 8, rstd, rows, n8);
        else
          rmsnorm_fwd_rows8_kernel<L.value, CH.value, false>
              <<<grid, kRows8Threads, 0, s>>>(x.p, ldx / 8, w, eps, zc, y.p, ldy / 8, rstd, rows, n8);
      }))
    return cudaGetLastError();
  rmsnorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, ldx, w, eps, zc, y, ldy, rstd, n);
  return cudaGetLastError();
}
namespace {
template <bool RES>
bool launch_rmsnorm_bwd_rows8(KIn dy, KIn x, int64_t ldx, KIn w, const float* rstd, bool zc, const void* residual,
                              KOut dx, int64_t ldd, int64_t rows, int64_t n, cudaStream_t s) {
  return dispatch_rows8(rows, n, [&](auto L, auto CH, unsigned grid) {
    const int n8 = static_cast<int>(n / 8);
    if (weight_f32x4(w))
      rmsnorm_bwd_rows8_kernel<L.value, CH.value, true, RES>
          <<<grid, kRows8Threads, 0, s>>>(dy.p, x.p, ldx / 8, w, rstd, zc, residual, dx.p, ldd / 8, rows, n8);
    else
      rmsnorm_bwd_rows8_kernel<L.value, CH.value, false, RES>
          <<<grid, kRows8Threads, 0, s>>>(dy.p, x.p, ldx / 8, w, rstd, zc, residual, dx.p, ldd / 8, rows, n8);
  });
}
}  // namespace

cudaError_t launch_rmsnorm_bwd(KIn dy, KIn x, KIn w, const float* rstd, bool zc, KOut dx, int64_t rows, int64_t n,
                               cudaStream_t s) {
  return launch_rmsnorm_bwd_ld(dy, x, n, w, rstd, zc, dx, n, rows, n, s);
}
cudaError_t launch_rmsnorm_bwd_ld(KIn dy, KIn x, int64_t ldx, KIn w, const float* rstd, bool zc, KOut dx, int64_t ldd,
                                  int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (ldx < n || ldd < n) return cudaErrorInvalidValue;
  if (all_bf16x8(n, dy, x, KIn{dx.p, dx.t}) && (ldx | ldd) % 8 == 0 &&
      launch_rmsnorm_bwd_rows8<false>(dy, x, ldx, w, rstd, zc, nullptr, dx, ldd, rows, n, s))
    return cudaGetLastError();
  rmsnorm_bwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, ldx, w, rstd, zc, dx, ldd, n);
  return cudaGetLastError();
}

bool rmsnorm_bwd_add_fits(KIn dy, KIn x, KIn residual, KOut dx, int64_t n) {
  return all_bf16x8(n, dy, x, residual, KIn{dx.p, dx.t}) && n > 0 && n <= 4096;
}

cudaError_t launch_rmsnorm_bwd_add(KIn dy, KIn x, KIn w, const float* rstd, bool zc, KIn residual, KOut dx,
                                   int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (!rmsnorm_bwd_add_fits(dy, x, residual, dx, n) ||
      !launch_rmsnorm_bwd_rows8<true>(dy, x, n, w, rstd, zc, residual.p, dx, n, rows, n, s))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
