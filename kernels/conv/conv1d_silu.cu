// Depthwise causal conv1d + SiLU per packed sequence (spec §3.4 step 3, §4.4), fp32 math:
//   pre[t,c] = Σ_{j<K} w[c,j]·x[t−(K−1)+j, c]   (terms before the sequence start are 0)
//   forward:  y (=) silu(pre)
//   backward: dpre[t] = dy[t]·silu'(pre[t]);  dx[τ,c] (=) Σ_j w[c,j]·dpre[τ+K−1−j, c]  (t inside the
//   sequence)
// K = 4 (every Qwen3.5 checkpoint): one thread per channel walks a tile of kTile tokens with the last K−1
// inputs (forward) or the next K pre-activation gradients (backward) in registers, so each input is read
// once per tile instead of K (forward) or K² (backward) times, and the sequence is looked up once per tile.
// Other K: one thread per (t, c), the backward recomputing the K pre-activations it needs.
// bf16 tensors with C % 8 == 0 (the training case): 4 channels x 8 tokens a thread with every row loaded up
// front, both directions (conv_rows.cuh; session 31, replacing session 7's shared-memory forward tiles and
// session 28's backward walk; docs/perf/PERF_NOTES.md).
// The output (forward) and the incoming gradient (backward) may be column parts (ColParts: the GDN layer's
// q | k | v as their own tensors).
#include <initializer_list>

#include "common/device.cuh"
#include "conv/conv.cuh"
#include "conv/conv_rows.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;

// Column c of a ColParts tensor: its part's pointer, and the element (t, c) at p + t·ld + col.
template <class P>
struct PartCol {
  P p;
  int64_t ld, col;
};
template <class P>
__device__ __forceinline__ PartCol<P> part_col(const ColParts<P>& cp, int64_t c) {
  int i = 0;
  while (i + 1 < cp.n && c >= cp.end[i]) ++i;
  const int64_t begin = i ? cp.end[i - 1] : 0;
  return {cp.part[i], cp.end[i] - begin, c - begin};
}

__device__ __forceinline__ float conv_pre(KIn x, KIn w, int64_t t, int64_t c, int64_t start, int64_t C, int K) {
  float acc = 0.f;
  for (int j = 0; j < K; ++j) {
    const int64_t src = t - (K - 1) + j;
    if (src >= start) acc += ld(w, c * K + j) * ld(x, src * C + c);
  }
  return acc;
}

__global__ void conv_fwd_kernel(KIn x, KIn w, const int32_t* cu, int nseq, ColParts<KOut> y, int64_t T,
                                int64_t C, int K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    const int64_t start = cu[seq_of_token(cu, nseq, t)];
    const PartCol<KOut> o = part_col(y, c);
    st(o.p, t * o.ld + o.col, siluf_(conv_pre(x, w, t, c, start, C, K)));
  }
}

__global__ void conv_bwd_kernel(ColParts<KIn> dy, KIn x, KIn w, const int32_t* cu, int nseq, KOut dx,
                                int64_t T, int64_t C, int K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tau = i / C, c = i % C;
    const int sq = seq_of_token(cu, nseq, tau);
    const int64_t start = cu[sq], end = cu[sq + 1];
    const PartCol<KIn> g = part_col(dy, c);
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
      const int64_t t = tau + K - 1 - j;
      if (t >= end) continue;
      const float dpre = ld(g.p, t * g.ld + g.col) * dsiluf_(conv_pre(x, w, t, c, start, C, K));
      acc += ld(w, c * K + j) * dpre;
    }
    st(dx, i, acc);
  }
}

constexpr int kTile = 64;     // tokens per thread
constexpr int kTileCh = 128;  // channels (threads) per block

// Tile of one channel: tokens [t0, t1) with the sequence containing t0.
struct ConvTile {
  int64_t c, t0, t1;
  int sq;
};
__device__ __forceinline__ bool conv_tile(ConvTile& r, const int32_t* cu, int nseq, int64_t T, int64_t C) {
  r.c = blockIdx.x * int64_t(kTileCh) + threadIdx.x;
  r.t0 = blockIdx.y * int64_t(kTile);
  r.t1 = r.t0 + kTile < T ? r.t0 + kTile : T;
  if (r.c >= C) return false;
  r.sq = seq_of_token(cu, nseq, r.t0);
  return true;
}

// The causal window of one channel walking tokens in order: the weights and the last K−1 inputs of the
// current sequence in registers. pre(t) must be called for consecutive t; it returns Σ_j w[j]·x[t−(K−1)+j].
template <int K>
struct ConvWindow {
  float wr[K], hist[K - 1];  // hist[K-2] = x[t-1]
  int sq;
  int64_t start, end;
  __device__ ConvWindow(KIn x, KIn w, const int32_t* cu, const ConvTile& tl, int64_t C) : sq(tl.sq) {
#pragma unroll
    for (int j = 0; j < K; ++j) wr[j] = ld(w, tl.c * K + j);
    start = cu[sq], end = cu[sq + 1];
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
      const int64_t src = tl.t0 - (K - 1) + j;
      hist[j] = src >= start ? ld(x, src * C + tl.c) : 0.f;
    }
  }
  __device__ float pre(KIn x, const int32_t* cu, int64_t t, int64_t c, int64_t C) {
    if (t == end) {  // a new sequence starts: nothing before it contributes
      start = end, end = cu[++sq + 1];
#pragma unroll
      for (int j = 0; j < K - 1; ++j) hist[j] = 0.f;
    }
    const float xt = ld(x, t * C + c);
    float p = wr[K - 1] * xt;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) p += wr[j] * hist[j];
#pragma unroll
    for (int j = 0; j < K - 2; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = xt;
    return p;
  }
};

template <int K>
__global__ void __launch_bounds__(kTileCh)
    conv_fwd_tiled_kernel(KIn x, KIn w, const int32_t* cu, int nseq, ColParts<KOut> y, int64_t T, int64_t C) {
  ConvTile tl;
  if (!conv_tile(tl, cu, nseq, T, C)) return;
  ConvWindow<K> win(x, w, cu, tl, C);
  const PartCol<KOut> o = part_col(y, tl.c);
  for (int64_t t = tl.t0; t < tl.t1; ++t) st(o.p, t * o.ld + o.col, siluf_(win.pre(x, cu, t, tl.c, C)));
}

// dx[τ] = Σ_j w[j]·dpre[τ+K−1−j] over t = τ+K−1−j in τ's sequence. Walks t from t0 to t1+K−2 computing
// dpre[t] (x history reset at sequence starts) and emits dx[t−K+1] once its K terms are known.
template <int K>
__global__ void __launch_bounds__(kTileCh)
    conv_bwd_tiled_kernel(ColParts<KIn> dy, KIn x, KIn w, const int32_t* cu, int nseq, KOut dx, int64_t T,
                          int64_t C) {
  ConvTile tl;
  if (!conv_tile(tl, cu, nseq, T, C)) return;
  ConvWindow<K> win(x, w, cu, tl, C);
  const PartCol<KIn> g = part_col(dy, tl.c);
  float dp[K];  // dp[K-1] = dpre[t], dp[0] = dpre[t-K+1]
  int dsq[K];   // sequence of each dp slot (-1: none)
#pragma unroll
  for (int j = 0; j < K; ++j) dp[j] = 0.f, dsq[j] = -1;
  const int64_t t_last = tl.t1 + K - 1 < T ? tl.t1 + K - 1 : T;  // dpre needed for t < t_last
  for (int64_t t = tl.t0; t < tl.t1 + K - 1; ++t) {
#pragma unroll
    for (int j = 0; j < K - 1; ++j) dp[j] = dp[j + 1], dsq[j] = dsq[j + 1];
    if (t < t_last) {
      const float pre = win.pre(x, cu, t, tl.c, C);
      dp[K - 1] = ld(g.p, t * g.ld + g.col) * dsiluf_(pre);
      dsq[K - 1] = win.sq;
    } else {
      dp[K - 1] = 0.f, dsq[K - 1] = -1;
    }
    const int64_t tau = t - (K - 1);
    if (tau < tl.t0) continue;
    // dp[i] = dpre[tau + i] pairs with w[K-1-i]; only terms of tau's own sequence count.
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (dsq[i] == dsq[0]) acc += win.wr[K - 1 - i] * dp[i];
    st(dx, tau * C + tl.c, acc);
  }
}

template <class P>
bool conv_bf16_vec(int64_t C, std::initializer_list<KIn> ts, const ColParts<P>& parts) {
  if (C % 8 != 0) return false;
  for (const KIn& t : ts)
    if (t.t != KType::BF16 || reinterpret_cast<uintptr_t>(t.p) % 16 != 0) return false;
  for (int i = 0; i < parts.n; ++i)
    if (parts.end[i] % 8 != 0 || parts.part[i].t != KType::BF16 ||
        reinterpret_cast<uintptr_t>(parts.part[i].p) % 16 != 0)
      return false;
  return true;
}
}  // namespace

#ifndef DT_ATTN_EMU  // host launchers: not part of a host emulation build
namespace {
template <class P>
bool parts_ok(const ColParts<P>& cp, int64_t C) {
  if (cp.n < 1 || cp.n > kMaxColParts || cp.end[cp.n - 1] != C) return false;
  for (int i = 0; i < cp.n; ++i)
    if (cp.end[i] <= (i ? cp.end[i - 1] : 0) || cp.part[i].p == nullptr) return false;
  return true;
}
}  // namespace

cudaError_t launch_conv1d_silu_fwd(KIn x, KIn w, const int32_t* cu, int nseq, const ColParts<KOut>& y,
                                   int64_t T, int64_t C, int K, cudaStream_t s) {
  if (T * C == 0) return cudaSuccess;
  if (!parts_ok(y, C)) return cudaErrorInvalidValue;
  if (K == 4 && conv_bf16_vec(C, {x}, y)) {
    using namespace conv_rows;
    conv_fwd_rows_kernel<4, kFwdCh, kFwdTok><<<rows_grid<kFwdCh, kFwdTok>(T, C), dim3(kBlockX, kBlockY), 0, s>>>(
        static_cast<const bf16*>(x.p), w, cu, nseq, y, T, C);
  } else if (K == 4) {
    const dim3 grid(static_cast<unsigned>((C + kTileCh - 1) / kTileCh), static_cast<unsigned>((T + kTile - 1) / kTile));
    conv_fwd_tiled_kernel<4><<<grid, kTileCh, 0, s>>>(x, w, cu, nseq, y, T, C);
  } else {
    conv_fwd_kernel<<<grid_for(T * C, 256), 256, 0, s>>>(x, w, cu, nseq, y, T, C, K);
  }
  return cudaGetLastError();
}
cudaError_t launch_conv1d_silu_bwd(const ColParts<KIn>& dy, KIn x, KIn w, const int32_t* cu, int nseq,
                                   KOut dx, int64_t T, int64_t C, int K, cudaStream_t s) {
  if (T * C == 0) return cudaSuccess;
  if (!parts_ok(dy, C)) return cudaErrorInvalidValue;
  if (K == 4 && conv_bf16_vec(C, {x, KIn{dx.p, dx.t}}, dy)) {
    using namespace conv_rows;
    conv_bwd_rows_kernel<4, kBwdCh, kBwdTok><<<rows_grid<kBwdCh, kBwdTok>(T, C), dim3(kBlockX, kBlockY), 0, s>>>(
        dy, static_cast<const bf16*>(x.p), w, cu, nseq, static_cast<bf16*>(dx.p), T, C);
  } else if (K == 4) {
    const dim3 grid(static_cast<unsigned>((C + kTileCh - 1) / kTileCh), static_cast<unsigned>((T + kTile - 1) / kTile));
    conv_bwd_tiled_kernel<4><<<grid, kTileCh, 0, s>>>(dy, x, w, cu, nseq, dx, T, C);
  } else {
    conv_bwd_kernel<<<grid_for(T * C, 256), 256, 0, s>>>(dy, x, w, cu, nseq, dx, T, C, K);
  }
  return cudaGetLastError();
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
