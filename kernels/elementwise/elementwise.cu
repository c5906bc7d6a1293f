// Elementwise ops and whole-tensor reductions.
//   fill: y (=) c                      convert: y (=) x (any float storage -> any float storage)
//   copy_cols: y[r, y0+c] (=) x[r, x0+c]
//   add: y (+=) α·x                    scale: y (=) α·y
//   dropout: y (=) keep(i) ? x/(1−p) : 0, keep(i) = u(seed, i) >= p (same hash as dropout_uniform())
//   sigmoid: y (=) σ(x)
//   swiglu: out (=) silu(g)·u;  dg (=) dout·u·silu'(g), du (=) dout·silu(g)
//   sigmoid_mul: out (=) x·σ(g); dx (=) dout·σ(g), dg (=) dout·x·σ(g)(1−σ(g))
//   sum_squares: acc (+=) Σ x² (fp64 accumulation per thread and across blocks)
//   any_nonfinite: flag (=) 1 if some x is NaN/Inf
// Memory: plain grid-stride loops, one element per iteration, fp32 math in registers; copy_cols, add, swiglu and
// sigmoid_mul have 16-byte (8 x bf16) paths for bf16 tensors with aligned rows, the common case in the model's hot
// loop (same arithmetic per element: same bits).
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#include "elementwise/elementwise.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

#define DT_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(KOut y, int64_t n, float v) {
  DT_GRID_STRIDE(i, n) st(y, i, v);
}
__global__ void convert_kernel(KOut y, KIn x, int64_t n) {
  DT_GRID_STRIDE(i, n) st(y, i, ld(x, i));
}
__global__ void copy_cols_kernel(KOut y, int64_t y_cols, int64_t y_col, KIn x, int64_t x_cols, int64_t x_col,
                                 int64_t rows, int64_t ncols) {
  DT_GRID_STRIDE(i, rows * ncols) {
    const int64_t r = i / ncols, c = i % ncols;
    st(y, r * y_cols + y_col + c, ld(x, r * x_cols + x_col + c));
  }
}
// 8 bf16 per thread: rows of ncols8 16-byte vectors.
__global__ void copy_cols_bf16x8_kernel(uint4* y, int64_t y_cols8, const uint4* x, int64_t x_cols8, int64_t rows,
                                        int64_t ncols8) {
  DT_GRID_STRIDE(i, rows * ncols8) {
    const int64_t r = i / ncols8, c = i % ncols8;
    y[r * y_cols8 + c] = x[r * x_cols8 + c];
  }
}
__global__ void add_bf16x8_kernel(uint4* y, const uint4* x, float a, int64_t n8) {
  DT_GRID_STRIDE(i, n8) {
    uint4 yv = y[i];
    const uint4 xv = x[i];
    auto* yh = reinterpret_cast<__nv_bfloat162*>(&yv);
    const auto* xh = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 yf = __bfloat1622float2(yh[k]), xf = __bfloat1622float2(xh[k]);
      yh[k] = __floats2bfloat162_rn(yf.x + a * xf.x, yf.y + a * xf.y);
    }
    y[i] = yv;
  }
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void add_kernel(KOut y, KIn x, float a, int64_t n) {
  DT_GRID_STRIDE(i, n) st(y, i, ld(y, i) + a * ld(x, i));
}
__global__ void scale_kernel(KOut y, float a, int64_t n) {
  DT_GRID_STRIDE(i, n) st(y, i, a * ld(y, i));
}
__device__ __forceinline__ float dropout_u(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}
__global__ void dropout_kernel(KIn x, float p, float inv_keep, uint64_t seed, KOut y, int64_t n) {
  DT_GRID_STRIDE(i, n) {
    const bool keep = dropout_u(seed, static_cast<uint64_t>(i)) >= p;
    st(y, i, keep ? ld(x, i) * inv_keep : 0.f);
  }
}
__global__ void sigmoid_kernel(KIn x, KOut y, int64_t n) {
  DT_GRID_STRIDE(i, n) st(y, i, sigmoidf_(ld(x, i)));
}
__global__ void swiglu_fwd_kernel(KIn g, KIn u, KOut o, int64_t n) {
  DT_GRID_STRIDE(i, n) st(o, i, siluf_(ld(g, i)) * ld(u, i));
}
__global__ void swiglu_bwd_kernel(KIn d, KIn g, KIn u, KOut dg, KOut du, int64_t n) {
  DT_GRID_STRIDE(i, n) {
    const float gv = ld(g, i), uv = ld(u, i), dv = ld(d, i);
    st(dg, i, dv * uv * dsiluf_(gv));
    st(du, i, dv * siluf_(gv));
  }
}
__global__ void swiglu_fwd_bf16x8_kernel(const void* g, const void* u, void* o, int64_t n8) {
  DT_GRID_STRIDE(i, n8) {
    const Bf16x8 gv = ld8(g, i), uv = ld8(u, i);
    Bf16x8 r;
#pragma unroll
    for (int k = 0; k < 8; ++k) r.v[k] = siluf_(gv.v[k]) * uv.v[k];
    st8(o, i, r);
  }
}
__global__ void swiglu_bwd_bf16x8_kernel(const void* d, const void* g, const void* u, void* dg, void* du,
                                         int64_t n8) {
  DT_GRID_STRIDE(i, n8) {
    const Bf16x8 dv = ld8(d, i), gv = ld8(g, i), uv = ld8(u, i);
    Bf16x8 rg, ru;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      rg.v[k] = dv.v[k] * uv.v[k] * dsiluf_(gv.v[k]);
      ru.v[k] = dv.v[k] * siluf_(gv.v[k]);
    }
    st8(dg, i, rg);
    st8(du, i, ru);
  }
}
__global__ void sigmoid_mul_fwd_kernel(KIn x, KIn g, KOut o, int64_t n) {
  DT_GRID_STRIDE(i, n) st(o, i, ld(x, i) * sigmoidf_(ld(g, i)));
}
__global__ void sigmoid_mul_bwd_kernel(KIn d, KIn x, KIn g, KOut dx, KOut dg, int64_t n) {
  DT_GRID_STRIDE(i, n) {
    const float s = sigmoidf_(ld(g, i)), dv = ld(d, i);
    st(dx, i, dv * s);
    st(dg, i, dv * ld(x, i) * s * (1.f - s));
  }
}
// Group i of the gate: i itself (contiguous) or row i / cols8, group i % cols8 of rows ldg8 groups apart
// (kCols).
template <bool kCols>
__device__ __forceinline__ int64_t gate_group(int64_t i, int64_t cols8, int64_t ldg8) {
  if constexpr (kCols) return (i / cols8) * ldg8 + i % cols8;
  return i;
}
template <bool kCols>
__global__ void sigmoid_mul_fwd_bf16x8_kernel(const void* x, const void* g, void* o, int64_t n8,
                                              int64_t cols8, int64_t ldg8) {
  DT_GRID_STRIDE(i, n8) {
    const Bf16x8 xv = ld8(x, i), gv = ld8(g, gate_group<kCols>(i, cols8, ldg8));
    Bf16x8 r;
#pragma unroll
    for (int k = 0; k < 8; ++k) r.v[k] = xv.v[k] * sigmoidf_(gv.v[k]);
    st8(o, i, r);
  }
}
template <bool kCols>
__global__ void sigmoid_mul_bwd_bf16x8_kernel(const void* d, const void* x, const void* g, void* dx, void* dg,
                                              int64_t n8, int64_t cols8, int64_t ldg8) {
  DT_GRID_STRIDE(i, n8) {
    const int64_t gi = gate_group<kCols>(i, cols8, ldg8);
    const Bf16x8 dv = ld8(d, i), xv = ld8(x, i), gv = ld8(g, gi);
    Bf16x8 rx, rg;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float sg = sigmoidf_(gv.v[k]);
      rx.v[k] = dv.v[k] * sg;
      rg.v[k] = dv.v[k] * xv.v[k] * sg * (1.f - sg);
    }
    st8(dx, i, rx);
    st8(dg, gi, rg);
  }
}
}  // namespace

cudaError_t launch_fill(KOut y, int64_t n, float v, cudaStream_t s) {
  if (n > 0) fill_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(y, n, v);
  return cudaGetLastError();
}
cudaError_t launch_convert(KOut y, KIn x, int64_t n, cudaStream_t s) {
  if (n > 0) convert_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(y, x, n);
  return cudaGetLastError();
}
cudaError_t launch_copy_cols(KOut y, int64_t y_cols, int64_t y_col, KIn x, int64_t x_cols, int64_t x_col,
                             int64_t rows, int64_t ncols, cudaStream_t s) {
  if (rows * ncols <= 0) return cudaSuccess;
  if (y.t == KType::BF16 && x.t == KType::BF16 && (y_cols | y_col | x_cols | x_col | ncols) % 8 == 0 &&
      aligned16(y.p) && aligned16(x.p)) {
    const int64_t n8 = rows * (ncols / 8);
    copy_cols_bf16x8_kernel<<<grid_for(n8, kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(y.p) + y_col / 8, y_cols / 8, static_cast<const uint4*>(x.p) + x_col / 8, x_cols / 8, rows,
        ncols / 8);
    return cudaGetLastError();
  }
  copy_cols_kernel<<<grid_for(rows * ncols, kThreads), kThreads, 0, s>>>(y, y_cols, y_col, x, x_cols, x_col,
                                                                          rows, ncols);
  return cudaGetLastError();
}
cudaError_t launch_add(KOut y, KIn x, float a, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (y.t == KType::BF16 && x.t == KType::BF16 && n % 8 == 0 && aligned16(y.p) && aligned16(x.p)) {
    add_bf16x8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(static_cast<uint4*>(y.p),
                                                                     static_cast<const uint4*>(x.p), a, n / 8);
    return cudaGetLastError();
  }
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(y, x, a, n);
  return cudaGetLastError();
}
cudaError_t launch_scale(KOut y, float a, int64_t n, cudaStream_t s) {
  if (n > 0) scale_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(y, a, n);
  return cudaGetLastError();
}
cudaError_t launch_dropout(KIn x, float p, uint64_t seed, KOut y, int64_t n, cudaStream_t s) {
  const float inv_keep = p < 1.f ? 1.f / (1.f - p) : 0.f;
  if (n > 0) dropout_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, p, inv_keep, seed, y, n);
  return cudaGetLastError();
}
cudaError_t launch_sigmoid(KIn x, KOut y, int64_t n, cudaStream_t s) {
  if (n > 0) sigmoid_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, y, n);
  return cudaGetLastError();
}
cudaError_t launch_swiglu_fwd(KIn g, KIn u, KOut o, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (all_bf16x8(n, g, u, o)) {
    swiglu_fwd_bf16x8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(g.p, u.p, o.p, n / 8);
    return cudaGetLastError();
  }
  swiglu_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(g, u, o, n);
  return cudaGetLastError();
}
cudaError_t launch_swiglu_bwd(KIn d, KIn g, KIn u, KOut dg, KOut du, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (all_bf16x8(n, d, g, u, dg, du)) {
    swiglu_bwd_bf16x8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(d.p, g.p, u.p, dg.p, du.p, n / 8);
    return cudaGetLastError();
  }
  swiglu_bwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(d, g, u, dg, du, n);
  return cudaGetLastError();
}
cudaError_t launch_sigmoid_mul_fwd(KIn x, KIn g, KOut o, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (all_bf16x8(n, x, g, o))  // the attention output gate: 1.2 TB/s through the typed one-element loads
    sigmoid_mul_fwd_bf16x8_kernel<false>
        <<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(x.p, g.p, o.p, n / 8, 0, 0);
  else
    sigmoid_mul_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, g, o, n);
  return cudaGetLastError();
}
cudaError_t launch_sigmoid_mul_bwd(KIn d, KIn x, KIn g, KOut dx, KOut dg, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (all_bf16x8(n, d, x, g, dx, dg))
    sigmoid_mul_bwd_bf16x8_kernel<false>
        <<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(d.p, x.p, g.p, dx.p, dg.p, n / 8, 0, 0);
  else
    sigmoid_mul_bwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(d, x, g, dx, dg, n);
  return cudaGetLastError();
}
bool sigmoid_mul_cols_fits(std::initializer_list<KIn> ts, int64_t cols, int64_t ld_g) {
  if (cols <= 0 || cols % 8 != 0 || ld_g % 8 != 0 || ld_g < cols) return false;
  for (const KIn& t : ts)
    if (!all_bf16x8(8, t)) return false;
  return true;
}
cudaError_t launch_sigmoid_mul_fwd_cols(KIn x, KIn g, int64_t ld_g, KOut o, int64_t rows, int64_t cols,
                                        cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (!sigmoid_mul_cols_fits({x, g, KIn{o.p, o.t}}, cols, ld_g)) return cudaErrorInvalidValue;
  const int64_t n8 = rows * cols / 8;
  sigmoid_mul_fwd_bf16x8_kernel<true>
      <<<grid_for(n8, kThreads), kThreads, 0, s>>>(x.p, g.p, o.p, n8, cols / 8, ld_g / 8);
  return cudaGetLastError();
}
cudaError_t launch_sigmoid_mul_bwd_cols(KIn d, KIn x, KIn g, int64_t ld_g, KOut dx, KOut dg, int64_t rows,
                                        int64_t cols, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (!sigmoid_mul_cols_fits({d, x, g, KIn{dx.p, dx.t}, KIn{dg.p, dg.t}}, cols, ld_g))
    return cudaErrorInvalidValue;
  const int64_t n8 = rows * cols / 8;
  sigmoid_mul_bwd_bf16x8_kernel<true>
      <<<grid_for(n8, kThreads), kThreads, 0, s>>>(d.p, x.p, g.p, dx.p, dg.p, n8, cols / 8, ld_g / 8);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
