// Depthwise causal conv1d + SiLU for bf16 tensors with C % 8 == 0 (the training case; conv1d_silu.cu holds
// the general kernels and the formulas). A thread owns CH channels of a row (8 bytes at CH = 4) over TOK tokens
// and loads every row it needs (its tokens, the K − 1 before them and, backward, the K − 1 after) at once,
// before any use: no shared memory, no barrier, 11 (forward) or 25 (backward) loads in flight per thread at
// 4 x 8. The halo rows are read again by the thread of the neighbouring tokens (an L1/L2 hit, not a second
// DRAM read); the backward computes the K − 1 pre-activation gradients after its run again.
// The sigmoid is ex2.approx + rcp.approx (4 instructions): the IEEE expf and division cost ~30 instructions
// an element, which made the earlier kernels issue-bound near half the DRAM rate. A thread whose rows hold no
// sequence start and no end of the tensor (nearly all) walks them without the per-row checks. Sums run in the
// general kernels' order; only the sigmoid's last bits differ from them. Every (CH, TOK) gives the same bits;
// bench/conv/bench_conv times them (docs/perf/PERF_NOTES.md, session 31).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/device.cuh"
#include "conv/conv.cuh"

namespace deltatune::kernels::conv_rows {

using bf16 = __nv_bfloat16;
constexpr int kFwdCh = 4;   // channels per thread, forward (8 bytes)
constexpr int kBwdCh = 4;   // channels per thread, backward (8 bytes)
constexpr int kFwdTok = 8;  // tokens per thread, forward
constexpr int kBwdTok = 8;  // tokens per thread, backward
constexpr int kBlockX = 32; // channel pieces per block (one warp along a row)
constexpr int kBlockY = 4;  // token runs per block (32 tokens)

// CH bf16 of a row as one load: uint4 (8), uint2 (4) or one word (2).
template <int CH>
struct PieceT;
template <>
struct PieceT<8> {
  using type = uint4;
};
template <>
struct PieceT<4> {
  using type = uint2;
};
template <>
struct PieceT<2> {
  using type = unsigned;
};
template <int CH>
using Piece = typename PieceT<CH>::type;

__device__ __forceinline__ float sigmoid_fast(float x) {
#ifdef __CUDA_ARCH__
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-1.44269504088896341f * x));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.f + e));
  return r;
#else  // host emulation
  return 1.f / (1.f + std::exp(-x));
#endif
}

template <int CH>
__device__ __forceinline__ void unpack(const Piece<CH>& raw, float (&f)[CH]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < CH / 2; ++k) {
    const float2 v = __bfloat1622float2(h[k]);
    f[2 * k] = v.x, f[2 * k + 1] = v.y;
  }
}
template <int CH>
__device__ __forceinline__ Piece<CH> pack(const float (&f)[CH]) {
  Piece<CH> raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < CH / 2; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  return raw;
}
template <int CH>
__device__ __forceinline__ Piece<CH> load_piece(const bf16* p, bool ok) {
  Piece<CH> r{};
  if (ok) r = __ldg(reinterpret_cast<const Piece<CH>*>(p));
  return r;
}

// This thread's channels c .. c + CH − 1 and tokens t0 .. t0 + TOK − 1 (false: nothing to do).
template <int CH, int TOK>
__device__ __forceinline__ bool row_tile(int64_t& c, int64_t& t0, int64_t T, int64_t C) {
  c = (blockIdx.x * int64_t(kBlockX) + threadIdx.x) * CH;
  t0 = (blockIdx.y * int64_t(kBlockY) + threadIdx.y) * TOK;
  return c < C && t0 < T;
}
template <int K, int CH>
__device__ __forceinline__ void load_weights(KIn w, int64_t c, float (&wr)[K][CH]) {
  // fp32 taps of K = 4 (the uploaded checkpoints): one 16-byte load a channel. One 4-byte load a tap put a
  // warp's lanes on CH·K·4 bytes apart, up to 32 L1 wavefronts an instruction: 1024 a warp at 8 channels.
  if (K == 4 && w.t == KType::F32 && reinterpret_cast<uintptr_t>(w.p) % 16 == 0) {
    const float4* w4 = static_cast<const float4*>(w.p) + c;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
      const float4 v = __ldg(w4 + k);
      wr[0][k] = v.x, wr[1 % K][k] = v.y, wr[2 % K][k] = v.z, wr[3 % K][k] = v.w;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < CH; ++k)
#pragma unroll
    for (int j = 0; j < K; ++j) wr[j][k] = ld(w, (c + k) * K + j);
}
// Column c's piece of a ColParts tensor: row 0's address and the row stride (a thread's channels lie in one
// part). Unrolled over the parts so the parameter struct stays out of local memory.
template <class P>
__device__ __forceinline__ bf16* piece_of(const ColParts<P>& cp, int64_t c, int64_t& ld_row) {
  const void* p = cp.part[0].p;
  int64_t begin = 0, end = cp.end[0];
#pragma unroll
  for (int i = 1; i < kMaxColParts; ++i)
    if (i < cp.n && c >= cp.end[i - 1]) p = cp.part[i].p, begin = cp.end[i - 1], end = cp.end[i];
  ld_row = end - begin;
  return static_cast<bf16*>(const_cast<void*>(p)) + (c - begin);
}

// pre[k] = Σ_j w[j]·x[t−(K−1)+j] from x[t] (xt) and the K − 1 inputs before it (h, oldest first; zeros before
// the sequence start), the general kernels' order; then h moves on by one token.
template <int K, int CH>
__device__ __forceinline__ void window_pre(const float (&wr)[K][CH], float (&h)[K - 1][CH], const float (&xt)[CH],
                                           float (&pre)[CH]) {
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    float p = wr[K - 1][k] * xt[k];
#pragma unroll
    for (int j = 0; j < K - 1; ++j) p += wr[j][k] * h[j][k];
    pre[k] = p;
#pragma unroll
    for (int j = 0; j < K - 2; ++j) h[j][k] = h[j + 1][k];
    h[K - 2][k] = xt[k];
  }
}

// Rows r of the forward (y[t0 + r] = silu(pre)); kChecked: the rows may hold a sequence start or reach T.
template <int K, int CH, int TOK, bool kChecked>
__device__ __forceinline__ void fwd_rows(const Piece<CH> (&raw)[K - 1 + TOK], const float (&wr)[K][CH],
                                         float (&h)[K - 1][CH], const int32_t* cu, int sq, int64_t end, int64_t t0,
                                         int64_t T, bf16* yp, int64_t ld_y) {
  constexpr int H = K - 1;
#pragma unroll
  for (int r = 0; r < TOK; ++r) {
    const int64_t t = t0 + r;
    if (kChecked) {
      if (t >= T) break;
      if (t == end) {  // a new sequence starts: nothing before it contributes
        while (t == end) end = cu[++sq + 1];
#pragma unroll
        for (int j = 0; j < H; ++j)
#pragma unroll
          for (int k = 0; k < CH; ++k) h[j][k] = 0.f;
      }
    }
    float xt[CH], o[CH];
    unpack<CH>(raw[H + r], xt);
    window_pre<K, CH>(wr, h, xt, o);
#pragma unroll
    for (int k = 0; k < CH; ++k) o[k] = o[k] * sigmoid_fast(o[k]);
    *reinterpret_cast<Piece<CH>*>(yp + r * ld_y) = pack<CH>(o);
  }
}

// y[t] = silu(pre[t]).
template <int K, int CH, int TOK>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    conv_fwd_rows_kernel(const bf16* __restrict__ x, KIn w, const int32_t* cu, int nseq, ColParts<KOut> y,
                         int64_t T, int64_t C) {
  constexpr int H = K - 1;
  int64_t c, t0;
  if (!row_tile<CH, TOK>(c, t0, T, C)) return;
  const int sq = seq_of_token(cu, nseq, t0);
  const int64_t start = cu[sq], end = cu[sq + 1];
  const bf16* xp = x + (t0 - H) * C + c;
  Piece<CH> raw[H + TOK];  // x rows t0 − H .. t0 + TOK − 1 (zeros before the sequence start / past T)
  // The own rows first: the halo rows wait for the sequence start, and loads issue in order.
#pragma unroll
  for (int i = H; i < H + TOK; ++i) raw[i] = load_piece<CH>(xp + i * C, t0 - H + i < T);
#pragma unroll
  for (int i = 0; i < H; ++i) raw[i] = load_piece<CH>(xp + i * C, t0 - H + i >= start);
  float wr[K][CH];
  load_weights<K, CH>(w, c, wr);
  int64_t ld_y;
  bf16* yp = piece_of(y, c, ld_y);
  yp += t0 * ld_y;
  float h[H][CH];
#pragma unroll
  for (int j = 0; j < H; ++j) unpack<CH>(raw[j], h[j]);
  if (end >= t0 + TOK && T >= t0 + TOK)
    fwd_rows<K, CH, TOK, false>(raw, wr, h, cu, sq, end, t0, T, yp, ld_y);
  else
    fwd_rows<K, CH, TOK, true>(raw, wr, h, cu, sq, end, t0, T, yp, ld_y);
}

// The backward's walk over dpre rows i (t = t0 + i): dp/dsq shift, dpre[t] enters, dx[t − (K−1)] leaves once
// its K terms are known. kChecked: the rows may hold a sequence start or reach T (else every term counts).
template <int K, int CH, int TOK, bool kChecked>
__device__ __forceinline__ void bwd_rows(const Piece<CH> (&xraw)[2 * (K - 1) + TOK],
                                         const Piece<CH> (&graw)[K - 1 + TOK], const float (&wr)[K][CH],
                                         float (&h)[K - 1][CH], const int32_t* cu, int sq, int64_t end, int64_t t0,
                                         int64_t T, bf16* dxp, int64_t C) {
  constexpr int H = K - 1, NT = TOK + H;
  float dp[K][CH];  // dp[K-1] = dpre[t], dp[0] = dpre[t-K+1]
  int dsq[K];       // sequence of each dp slot (-1: none)
#pragma unroll
  for (int j = 0; j < K; ++j) {
    dsq[j] = -1;
#pragma unroll
    for (int k = 0; k < CH; ++k) dp[j][k] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int64_t t = t0 + i;
#pragma unroll
    for (int j = 0; j < H; ++j) {
      dsq[j] = dsq[j + 1];
#pragma unroll
      for (int k = 0; k < CH; ++k) dp[j][k] = dp[j + 1][k];
    }
    if (!kChecked || t < T) {
      if (kChecked && t == end) {  // a new sequence starts: nothing before it contributes
        while (t == end) end = cu[++sq + 1];
#pragma unroll
        for (int j = 0; j < H; ++j)
#pragma unroll
          for (int k = 0; k < CH; ++k) h[j][k] = 0.f;
      }
      float xt[CH], p[CH], gt[CH];
      unpack<CH>(xraw[H + i], xt);
      window_pre<K, CH>(wr, h, xt, p);
      unpack<CH>(graw[i], gt);
#pragma unroll
      for (int k = 0; k < CH; ++k) {
        const float s = sigmoid_fast(p[k]);
        dp[H][k] = gt[k] * (s * (1.f + p[k] * (1.f - s)));
      }
      dsq[H] = sq;
    } else {
#pragma unroll
      for (int k = 0; k < CH; ++k) dp[H][k] = 0.f;
      dsq[H] = -1;
    }
    if (i < H || (kChecked && t - H >= T)) continue;
    // dp[j] = dpre[tau + j] pairs with w[K-1-j]; only terms of tau's own sequence count.
    float acc[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) acc[k] = 0.f;
#pragma unroll
    for (int j = 0; j < K; ++j)
      if (!kChecked || dsq[j] == dsq[0]) {
#pragma unroll
        for (int k = 0; k < CH; ++k) acc[k] += wr[K - 1 - j][k] * dp[j][k];
      }
    *reinterpret_cast<Piece<CH>*>(dxp + (i - H) * C) = pack<CH>(acc);
  }
}

// dpre[t] = dy[t]·silu'(pre[t]) for t in t0 .. t0 + TOK + K − 2 (0 at t ≥ T), and dx[τ] = Σ_i w[K−1−i]·
// dpre[τ+i] over τ's own sequence, the general kernels' order. The K − 1 dpre rows after the run are
// computed again by the thread of the next tokens (cheaper than an exchange through shared memory here).
template <int K, int CH, int TOK>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    conv_bwd_rows_kernel(ColParts<KIn> dy, const bf16* __restrict__ x, KIn w, const int32_t* cu, int nseq,
                         bf16* __restrict__ dx, int64_t T, int64_t C) {
  constexpr int H = K - 1, NT = TOK + H;  // NT: dpre rows
  int64_t c, t0;
  if (!row_tile<CH, TOK>(c, t0, T, C)) return;
  const int sq = seq_of_token(cu, nseq, t0);
  const int64_t start = cu[sq], end = cu[sq + 1];
  int64_t ld_g;
  const bf16* gp = piece_of(dy, c, ld_g);
  gp += t0 * ld_g;
  const bf16* xp = x + (t0 - H) * C + c;
  Piece<CH> xraw[H + NT], graw[NT];  // x rows t0 − H .., dy rows t0 ..
  // The own rows first: the halo rows wait for the sequence start, and loads issue in order.
#pragma unroll
  for (int i = H; i < H + NT; ++i) xraw[i] = load_piece<CH>(xp + i * C, t0 - H + i < T);
#pragma unroll
  for (int i = 0; i < NT; ++i) graw[i] = load_piece<CH>(gp + i * ld_g, t0 + i < T);
#pragma unroll
  for (int i = 0; i < H; ++i) xraw[i] = load_piece<CH>(xp + i * C, t0 - H + i >= start);
  float wr[K][CH];
  load_weights<K, CH>(w, c, wr);
  float h[H][CH];
#pragma unroll
  for (int j = 0; j < H; ++j) unpack<CH>(xraw[j], h[j]);
  bf16* dxp = dx + t0 * C + c;
  if (end >= t0 + NT && T >= t0 + NT)
    bwd_rows<K, CH, TOK, false>(xraw, graw, wr, h, cu, sq, end, t0, T, dxp, C);
  else
    bwd_rows<K, CH, TOK, true>(xraw, graw, wr, h, cu, sq, end, t0, T, dxp, C);
}

// Grid of a kernel with CH channels and TOK tokens per thread.
template <int CH, int TOK>
dim3 rows_grid(int64_t T, int64_t C) {
  return dim3(static_cast<unsigned>((C / CH + kBlockX - 1) / kBlockX),
              static_cast<unsigned>((T + kBlockY * TOK - 1) / (kBlockY * TOK)));
}

}  // namespace deltatune::kernels::conv_rows
