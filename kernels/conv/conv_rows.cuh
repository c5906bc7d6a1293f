// Backward of the depthwise causal conv1d + SiLU for bf16 tensors with C % 8 == 0 (the training case;
// conv1d_silu.cu holds the general kernels, the forward and the formulas). A thread owns 4 channels of a row
// (8 bytes) over kRowTok tokens and loads every row it needs (x: its tokens and the K − 1 before and after
// them; dy: its tokens and the K − 1 after) at once, before any use: no shared memory, no barrier, 25 loads in
// flight per thread (8 channels would take 192 registers, 2 blocks an SM). The halo rows are read again by the
// thread of the neighbouring tokens (an L1/L2 hit, not a second DRAM read), and the K − 1 pre-activation
// gradients after the run are computed again there.
// The sigmoid is ex2.approx + rcp.approx (4 instructions): the IEEE expf and division cost ~30 instructions
// an element, which made the earlier kernel issue-bound near half the DRAM rate. A thread whose rows hold no
// sequence start and no end of the tensor (nearly all) walks them without the per-row checks. Sums run in the
// general kernels' order; only the sigmoid's last bits differ from them (the BF16 outputs agree to ~1 ulp).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/device.cuh"
#include "conv/conv.cuh"

namespace deltatune::kernels::conv_rows {

using bf16 = __nv_bfloat16;
constexpr int kBwdCh = 4;   // channels per thread (8 bytes)
constexpr int kRowTok = 8;  // tokens per thread
constexpr int kBlockX = 32; // channel pieces per block (one warp along a row)
constexpr int kBlockY = 4;  // token runs per block (32 tokens)

// CH bf16 of a row as one load: uint2 (4; the backward's width).
template <int CH>
struct PieceT;
template <>
struct PieceT<4> {
  using type = uint2;
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

// This thread's channels c .. c + CH − 1 and tokens t0 .. t0 + kRowTok − 1 (false: nothing to do).
template <int CH>
__device__ __forceinline__ bool row_tile(int64_t& c, int64_t& t0, int64_t T, int64_t C) {
  c = (blockIdx.x * int64_t(kBlockX) + threadIdx.x) * CH;
  t0 = (blockIdx.y * int64_t(kBlockY) + threadIdx.y) * kRowTok;
  return c < C && t0 < T;
}
template <int K, int CH>
__device__ __forceinline__ void load_weights(KIn w, int64_t c, float (&wr)[K][CH]) {
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

// The backward's walk over dpre rows i (t = t0 + i): dp/dsq shift, dpre[t] enters, dx[t − (K−1)] leaves once
// its K terms are known. kChecked: the rows may hold a sequence start or reach T (else every term counts).
template <int K, int CH, bool kChecked>
__device__ __forceinline__ void bwd_rows(const Piece<CH> (&xraw)[2 * (K - 1) + kRowTok],
                                         const Piece<CH> (&graw)[K - 1 + kRowTok], const float (&wr)[K][CH],
                                         float (&h)[K - 1][CH], const int32_t* cu, int sq, int64_t end, int64_t t0,
                                         int64_t T, bf16* dxp, int64_t C) {
  constexpr int H = K - 1, NT = kRowTok + H;
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

// dpre[t] = dy[t]·silu'(pre[t]) for t in t0 .. t0 + kRowTok + K − 2 (0 at t ≥ T), and dx[τ] = Σ_i w[K−1−i]·
// dpre[τ+i] over τ's own sequence, the general kernels' order.
template <int K>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    conv_bwd_rows_kernel(ColParts<KIn> dy, const bf16* __restrict__ x, KIn w, const int32_t* cu, int nseq,
                         bf16* __restrict__ dx, int64_t T, int64_t C) {
  constexpr int H = K - 1, NT = kRowTok + H, CH = kBwdCh;  // NT: dpre rows
  int64_t c, t0;
  if (!row_tile<CH>(c, t0, T, C)) return;
  const int sq = seq_of_token(cu, nseq, t0);
  const int64_t start = cu[sq], end = cu[sq + 1];
  int64_t ld_g;
  const bf16* gp = piece_of(dy, c, ld_g);
  gp += t0 * ld_g;
  const bf16* xp = x + (t0 - H) * C + c;
  Piece<CH> xraw[H + NT], graw[NT];  // x rows t0 − H .., dy rows t0 ..
#pragma unroll
  for (int i = 0; i < H + NT; ++i) {
    const int64_t t = t0 - H + i;
    xraw[i] = load_piece<CH>(xp + i * C, i < H ? t >= start : t < T);
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) graw[i] = load_piece<CH>(gp + i * ld_g, t0 + i < T);
  float wr[K][CH];
  load_weights<K, CH>(w, c, wr);
  float h[H][CH];
#pragma unroll
  for (int j = 0; j < H; ++j) unpack<CH>(xraw[j], h[j]);
  bf16* dxp = dx + t0 * C + c;
  if (end >= t0 + NT && T >= t0 + NT)
    bwd_rows<K, CH, false>(xraw, graw, wr, h, cu, sq, end, t0, T, dxp, C);
  else
    bwd_rows<K, CH, true>(xraw, graw, wr, h, cu, sq, end, t0, T, dxp, C);
}

// Grid of a kernel with CH channels per thread.
template <int CH>
dim3 rows_grid(int64_t T, int64_t C) {
  return dim3(static_cast<unsigned>((C / CH + kBlockX - 1) / kBlockX),
              static_cast<unsigned>((T + kBlockY * kRowTok - 1) / (kBlockY * kRowTok)));
}

}  // namespace deltatune::kernels::conv_rows
