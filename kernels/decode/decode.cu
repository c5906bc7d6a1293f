// Generation kernels (backend.h "generation", spec §3.9): fp32 math, FMA only, any arch sm_80+.
// - conv1d_silu_step: one thread per (sequence, channel) walks the sequence's new tokens with the last K-1
//   inputs in registers (read from and written back to conv_state [nseq, K-1, C]).
// - gdn_recurrent: the naive gated delta rule of spec §4.1 continued from a state. A block holds the F32 state
//   columns [dk, 16] of one (sequence, value head) in registers (128 threads: 16 columns x 8 row groups, each
//   thread dk/8 rows of one column) and walks the tokens; q̂, k̂ (L2-normalised in the block) in shared memory,
//   the two column sums per token (u = Sᵀk̂, o = Sᵀq̂) reduced by a shuffle and a shared-memory pass.
// - kv_cache_write: cache[n, positions[t]] (=) k[t], v[t].
// - attention_cached: one block per (token, query head), each warp an online softmax over a stride of the
//   cached keys 0..positions[t], the warps merged at the end.
#include "common/device.cuh"
#include "decode/decode.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kMaxConvK = 8;

__global__ void conv_step_kernel(KIn x, KIn w, const int32_t* cu, int nseq, KOut state, KOut y, int64_t C, int K) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= nseq * C) return;
  const int64_t n = i / C, c = i % C;
  float hist[kMaxConvK], wt[kMaxConvK + 1];
  for (int j = 0; j < K - 1; ++j) hist[j] = ld(state, (n * (K - 1) + j) * C + c);
  for (int j = 0; j < K; ++j) wt[j] = ld(w, c * K + j);
  for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
    const float xt = ld(x, t * C + c);
    float pre = wt[K - 1] * xt;
    for (int j = 0; j < K - 1; ++j) pre += wt[j] * hist[j];
    st(y, t * C + c, siluf_(pre));
    for (int j = 0; j + 1 < K - 1; ++j) hist[j] = hist[j + 1];
    if (K > 1) hist[K - 2] = xt;
  }
  for (int j = 0; j < K - 1; ++j) st(state, (n * (K - 1) + j) * C + c, hist[j]);
}

constexpr int kRecCols = 16, kRecRowGroups = 8, kRecThreads = kRecCols * kRecRowGroups, kRecMaxDk = 256;
constexpr int kRecRows = kRecMaxDk / kRecRowGroups;

__global__ void __launch_bounds__(kRecThreads) gdn_recurrent_kernel(KIn q, KIn k, KIn v, KIn g, KIn beta,
                                                                    const int32_t* cu, float* state, KOut o, int HK,
                                                                    int HV, int dk, int dv, float scale) {
  __shared__ float qs[kRecMaxDk], ks[kRecMaxDk], norms[2];
  __shared__ float red_u[kRecThreads / 32][kRecCols], red_o[kRecThreads / 32][kRecCols];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cl = tid % kRecCols, rg = tid / kRecCols;
  const int n = blockIdx.x / HV, j = blockIdx.x % HV, h = j / (HV / HK);
  const int c = blockIdx.y * kRecCols + cl;
  const bool col_ok = c < dv;
  float* S_g = state + (int64_t(n) * HV + j) * dk * dv;
  float S[kRecRows];
#pragma unroll
  for (int i = 0; i < kRecRows; ++i) {
    const int d = rg + kRecRowGroups * i;
    S[i] = (col_ok && d < dk) ? S_g[int64_t(d) * dv + c] : 0.f;
  }
  for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
    for (int d = tid; d < dk; d += kRecThreads) {
      qs[d] = ld(q, (t * HK + h) * dk + d);
      ks[d] = ld(k, (t * HK + h) * dk + d);
    }
    __syncthreads();
    if (warp < 2) {
      const float* src = warp == 0 ? qs : ks;
      float ss = 0.f;
      for (int d = lane; d < dk; d += 32) ss += src[d] * src[d];
      ss = warp_sum(ss);
      if (lane == 0) norms[warp] = ss;
    }
    __syncthreads();
    const float rq = rsqrtf(norms[0] + 1e-6f) * scale, rk = rsqrtf(norms[1] + 1e-6f);
    const float decay = expf(ld(g, t * HV + j)), b = ld(beta, t * HV + j);
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kRecRows; ++i) {
      const int d = rg + kRecRowGroups * i;
      S[i] *= decay;
      if (d < dk) part += S[i] * ks[d];
    }
    part += __shfl_xor_sync(0xffffffffu, part, 16);
    if (lane < 16) red_u[warp][cl] = part;
    __syncthreads();
    float u = 0.f;
#pragma unroll
    for (int w = 0; w < kRecThreads / 32; ++w) u += red_u[w][cl];
    const float delta = col_ok ? b * (ld(v, (t * HV + j) * dv + c) - u * rk) : 0.f;
    float po = 0.f;
#pragma unroll
    for (int i = 0; i < kRecRows; ++i) {
      const int d = rg + kRecRowGroups * i;
      if (d < dk) {
        S[i] += ks[d] * rk * delta;
        po += S[i] * qs[d];
      }
    }
    po += __shfl_xor_sync(0xffffffffu, po, 16);
    if (lane < 16) red_o[warp][cl] = po;
    __syncthreads();
    if (tid < kRecCols && col_ok) {
      float acc = 0.f;
#pragma unroll
      for (int w = 0; w < kRecThreads / 32; ++w) acc += red_o[w][cl];
      st(o, (t * HV + j) * dv + c, acc * rq);
    }
  }
#pragma unroll
  for (int i = 0; i < kRecRows; ++i) {
    const int d = rg + kRecRowGroups * i;
    if (col_ok && d < dk) S_g[int64_t(d) * dv + c] = S[i];
  }
}

__global__ void kv_write_kernel(KIn k, KIn v, const int32_t* cu, int nseq, const int32_t* pos, KOut kc, KOut vc,
                                int64_t T, int64_t L, int64_t row) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * row; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / row, e = i % row;
    const int64_t dst = (seq_of_token(cu, nseq, t) * L + pos[t]) * row + e;
    st(kc, dst, ld(k, i));
    st(vc, dst, ld(v, i));
  }
}

constexpr int kAttnWarps = 8, kAttnMaxHd = 256, kAttnPerLane = kAttnMaxHd / 32;

__global__ void __launch_bounds__(kAttnWarps * 32) attention_cached_kernel(KIn q, KIn kc, KIn vc, const int32_t* cu,
                                                                           int nseq, const int32_t* pos, KOut o,
                                                                           int nH, int nKV, int hd, int64_t L,
                                                                           float scale) {
  __shared__ float m_s[kAttnWarps], l_s[kAttnWarps], acc_s[kAttnWarps][kAttnMaxHd];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x / nH;
  const int h = blockIdx.x % nH, kvh = h / (nH / nKV);
  const int64_t n = seq_of_token(cu, nseq, t), len = int64_t(pos[t]) + 1;
  float qv[kAttnPerLane], acc[kAttnPerLane];
#pragma unroll
  for (int i = 0; i < kAttnPerLane; ++i) {
    const int e = lane + 32 * i;
    qv[i] = e < hd ? ld(q, (t * nH + h) * hd + e) * scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t jk = warp; jk < len; jk += kAttnWarps) {
    const int64_t base = ((n * L + jk) * nKV + kvh) * hd;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kAttnPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < hd) s += qv[i] * ld(kc, base + e);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < kAttnPerLane; ++i) {
      const int e = lane + 32 * i;
      acc[i] = acc[i] * corr + (e < hd ? p * ld(vc, base + e) : 0.f);
    }
    m = m_new;
  }
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kAttnPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < hd) acc_s[warp][e] = acc[i];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, m_s[w]);
  float denom = 0.f;
  for (int w = 0; w < kAttnWarps; ++w) denom += m_s[w] == -INFINITY ? 0.f : expf(m_s[w] - M) * l_s[w];
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float num = 0.f;
    for (int w = 0; w < kAttnWarps; ++w)
      if (m_s[w] != -INFINITY) num += expf(m_s[w] - M) * acc_s[w][e];
    st(o, (t * nH + h) * hd + e, num / denom);
  }
}

}  // namespace

#ifndef DT_DECODE_EMU  // launchers: not part of the host emulation build (emu/decode_emu.cpp)
cudaError_t launch_conv1d_silu_step(KIn x, KIn w, const int32_t* cu_seqlens, int nseq, KOut conv_state, KOut y,
                                    int64_t C, int K, cudaStream_t s) {
  if (K < 1 || K > kMaxConvK) return cudaErrorInvalidValue;
  const int threads = 256;
  conv_step_kernel<<<grid_for(nseq * C, threads, 1LL << 30), threads, 0, s>>>(x, w, cu_seqlens, nseq, conv_state, y,
                                                                             C, K);
  return cudaGetLastError();
}

cudaError_t launch_gdn_recurrent(KIn q, KIn k, KIn v, KIn g, KIn beta, const int32_t* cu_seqlens, int nseq,
                                 float* state, KOut o, int HK, int HV, int dk, int dv, float scale, cudaStream_t s) {
  if (dk < 1 || dk > kRecMaxDk || HK < 1 || HV % HK != 0 || nseq < 1) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>((dv + kRecCols - 1) / kRecCols));
  gdn_recurrent_kernel<<<grid, kRecThreads, 0, s>>>(q, k, v, g, beta, cu_seqlens, state, o, HK, HV, dk, dv, scale);
  return cudaGetLastError();
}

cudaError_t launch_kv_cache_write(KIn k, KIn v, const int32_t* cu_seqlens, int nseq, const int32_t* positions,
                                  KOut k_cache, KOut v_cache, int64_t T, int64_t L, int64_t row, cudaStream_t s) {
  const int threads = 256;
  kv_write_kernel<<<grid_for(T * row, threads), threads, 0, s>>>(k, v, cu_seqlens, nseq, positions, k_cache, v_cache,
                                                                 T, L, row);
  return cudaGetLastError();
}

cudaError_t launch_attention_cached(KIn q, KIn k_cache, KIn v_cache, const int32_t* cu_seqlens, int nseq,
                                    const int32_t* positions, KOut o, int64_t T, int nH, int nKV, int hd, int64_t L,
                                    float scale, cudaStream_t s) {
  if (hd < 1 || hd > kAttnMaxHd || nKV < 1 || nH % nKV != 0) return cudaErrorInvalidValue;
  attention_cached_kernel<<<static_cast<unsigned>(T * nH), kAttnWarps * 32, 0, s>>>(
      q, k_cache, v_cache, cu_seqlens, nseq, positions, o, nH, nKV, hd, L, scale);
  return cudaGetLastError();
}
#endif  // DT_DECODE_EMU

}  // namespace deltatune::kernels
