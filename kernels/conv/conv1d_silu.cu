// Depthwise causal conv1d + SiLU per packed sequence (spec §3.4 step 3, §4.4), fp32 math:
//   pre[t,c] = Σ_{j<K} w[c,j]·x[t−(K−1)+j, c]   (terms before the sequence start are 0)
//   forward:  y (=) silu(pre)
//   backward: dpre[t] = dy[t]·silu'(pre[t]);  dx[τ,c] (=) Σ_j w[c,j]·dpre[τ+K−1−j, c]  (t inside the
//   sequence)
// K = 4 (every Qwen3.5 checkpoint): one thread per channel walks a tile of kTile tokens with the last K−1
// inputs (forward) or the next K pre-activation gradients (backward) in registers, so each input is read
// once per tile instead of K (forward) or K² (backward) times, and the sequence is looked up once per tile.
// Other K: one thread per (t, c), the backward recomputing the K pre-activations it needs.
// bf16 tensors with C % 8 == 0 (the training case): the forward on shared-memory tiles of 64 tokens x 128
// channels staged with 16-byte copies (conv_fwd_smem_kernel; session 7), the backward on 4 channels x 8 tokens
// a thread with every row loaded up front (conv_rows.cuh; session 31: 88 -> 50 us at [4096, 6144] on an H200,
// where the same rows for the forward were slower than the tiles, 53.5 -> 71 us; docs/perf/PERF_NOTES.md).
// The output (forward) and the incoming gradient (backward) may be column parts (ColParts: the GDN layer's
// q | k | v as their own tensors).
#include <initializer_list>

#include "common/device.cuh"
#include "common/mma.cuh"
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

// ---- bf16 with C % 8 == 0 (the training case), forward: shared-memory tiles ----
// A block stages kSTok tokens (plus the K−1 before them, and for the backward the K−1 after) x kSCh channels
// of x (and dy) with 16-byte cp.async, each thread then walks its own channel through the tile, and the
// results leave through the same tile as 16-byte row pieces. (One thread per channel reading x from global
// memory as it walks, the kernels above, keeps one load in flight at a time.) The arithmetic per output is
// the walking kernels' (same terms, same order). Every column part (ColParts) is bf16, 16-byte aligned, a
// multiple of 8 wide.
constexpr int kSTok = 64;           // tokens per block
constexpr int kSCh = 128;           // channels (= threads) per block
constexpr int kSPieces = kSCh / 8;  // 16-byte pieces per staged row

// rows × kSCh bf16 of a (T, ld) tensor region: rows of tokens first + r (zeros outside [0, T)), columns c0 ..
// (zeros past C). P: KIn/ColParts lookup of each 16-byte piece.
template <class Src>
__device__ __forceinline__ void stage_tile(bf16* tile, int rows, int64_t first, int64_t T, int64_t c0,
                                           int64_t C, Src&& src) {
  for (int idx = threadIdx.x; idx < rows * kSPieces; idx += kSCh) {
    const int r = idx / kSPieces, q = idx % kSPieces;
    const int64_t t = first + r, c = c0 + 8 * q;
    const bool ok = c < C && t >= 0 && t < T;
    mma::cp_async16(mma::smem_addr(tile + r * kSCh + 8 * q), src(ok ? t : 0, ok ? c : 0), ok);
  }
}
// Sequence of token first + r for r < rows (−1 outside [0, T)).
__device__ __forceinline__ void stage_seq_ids(int* sid, int rows, int64_t first, int64_t T, const int32_t* cu,
                                              int nseq) {
  for (int r = threadIdx.x; r < rows; r += kSCh) {
    const int64_t t = first + r;
    sid[r] = t >= 0 && t < T ? seq_of_token(cu, nseq, t) : -1;
  }
}
// pre of the token at x row r + K − 1 (taps at rows r .. r + K − 1 of this thread's column), as ConvWindow.
template <int K>
__device__ __forceinline__ float tile_pre(const bf16* xs, const int* sid, int r, const float (&wr)[K]) {
  const int col = threadIdx.x, me = sid[r + K - 1];
  float p = wr[K - 1] * __bfloat162float(xs[(r + K - 1) * kSCh + col]);
#pragma unroll
  for (int j = 0; j < K - 1; ++j)
    p += wr[j] * (sid[r + j] == me ? __bfloat162float(xs[(r + j) * kSCh + col]) : 0.f);
  return p;
}
// Tokens t0 + r of a tile whose rows all lie in one sequence (block-uniform: sid runs from first to last
// row without a reset): the taps need no masks, and a thread keeps its last K−1 inputs in registers
// (ConvWindow's arithmetic: the same sum in the same order as tile_pre with every tap in).
template <int K>
struct TileWindow {
  float h[K - 1];
  __device__ explicit TileWindow(const bf16* xs) {
#pragma unroll
    for (int j = 0; j < K - 1; ++j) h[j] = __bfloat162float(xs[j * kSCh + threadIdx.x]);
  }
  // pre of the token at x row r + K − 1; call for r = 0, 1, 2, ...
  __device__ float next(const bf16* xs, int r, const float (&wr)[K]) {
    const float xt = __bfloat162float(xs[(r + K - 1) * kSCh + threadIdx.x]);
    float p = wr[K - 1] * xt;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) p += wr[j] * h[j];
#pragma unroll
    for (int j = 0; j < K - 2; ++j) h[j] = h[j + 1];
    h[K - 2] = xt;
    return p;
  }
};
__device__ __forceinline__ bool one_sequence(const int* sid, int rows) {
  return sid[0] >= 0 && sid[0] == sid[rows - 1];
}

// The first `rows` rows of the tile out as 16-byte pieces to tokens t0 + r (< T), columns c0 .. (< C).
template <class Dst>
__device__ __forceinline__ void store_tile(const bf16* tile, int rows, int64_t t0, int64_t T, int64_t c0,
                                           int64_t C, Dst&& dst) {
  for (int idx = threadIdx.x; idx < rows * kSPieces; idx += kSCh) {
    const int r = idx / kSPieces, q = idx % kSPieces;
    const int64_t t = t0 + r, c = c0 + 8 * q;
    if (c < C && t < T)
      *reinterpret_cast<uint4*>(dst(t, c)) = *reinterpret_cast<const uint4*>(tile + r * kSCh + 8 * q);
  }
}
template <class P>
__device__ __forceinline__ bf16* part_at(const ColParts<P>& cp, int64_t t, int64_t c) {
  const PartCol<P> pc = part_col(cp, c);
  return static_cast<bf16*>(const_cast<void*>(pc.p.p)) + t * pc.ld + pc.col;
}

template <int K>
__global__ void __launch_bounds__(kSCh)
    conv_fwd_smem_kernel(const bf16* x, KIn w, const int32_t* cu, int nseq, ColParts<KOut> y, int64_t T,
                         int64_t C) {
  constexpr int XR = kSTok + K - 1;             // x rows: tokens t0 − (K−1) .. t0 + kSTok − 1
  __shared__ __align__(16) bf16 xs[XR * kSCh];  // rows 0 .. kSTok − 1 then hold y
  __shared__ int sid[XR];
  const int64_t c0 = blockIdx.x * int64_t(kSCh), t0 = blockIdx.y * int64_t(kSTok), first = t0 - (K - 1);
  stage_tile(xs, XR, first, T, c0, C, [&](int64_t t, int64_t c) { return x + t * C + c; });
  mma::cp_async_commit();
  stage_seq_ids(sid, XR, first, T, cu, nseq);
  const int64_t c = c0 + threadIdx.x;
  float wr[K];
#pragma unroll
  for (int j = 0; j < K; ++j) wr[j] = c < C ? ld(w, c * K + j) : 0.f;
  mma::cp_async_wait<0>();
  __syncthreads();
  // Row r of y overwrites x row r of this thread's column, which no later step of it reads.
  if (one_sequence(sid, XR)) {
    TileWindow<K> win(xs);
    for (int r = 0; r < kSTok; ++r)
      xs[r * kSCh + threadIdx.x] = __float2bfloat16_rn(siluf_(win.next(xs, r, wr)));
  } else {
    for (int r = 0; r < kSTok; ++r)
      xs[r * kSCh + threadIdx.x] = __float2bfloat16_rn(siluf_(tile_pre<K>(xs, sid, r, wr)));
  }
  __syncthreads();
  store_tile(xs, kSTok, t0, T, c0, C, [&](int64_t t, int64_t cc) { return part_at(y, t, cc); });
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
dim3 conv_tile_grid(int64_t T, int64_t C) {
  return dim3(static_cast<unsigned>((C + kSCh - 1) / kSCh), static_cast<unsigned>((T + kSTok - 1) / kSTok));
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
    conv_fwd_smem_kernel<4>
        <<<conv_tile_grid(T, C), kSCh, 0, s>>>(static_cast<const bf16*>(x.p), w, cu, nseq, y, T, C);
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
    conv_rows::conv_bwd_rows_kernel<4>
        <<<conv_rows::rows_grid<conv_rows::kBwdCh>(T, C), dim3(conv_rows::kBlockX, conv_rows::kBlockY), 0, s>>>(
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
