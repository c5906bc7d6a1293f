// Depthwise causal conv1d + SiLU per packed sequence (spec §3.4 step 3, §4.4), fp32 math:
//   pre[t,c] = Σ_{j<K} w[c,j]·x[t−(K−1)+j, c]   (terms before the sequence start are 0)
//   forward:  y (=) silu(pre)
//   backward: dpre[t] = dy[t]·silu'(pre[t]);  dx[τ,c] (=) Σ_j w[c,j]·dpre[τ+K−1−j, c]  (t inside the sequence)
// One thread per (t, c); the backward recomputes the K pre-activations it needs (K² FMAs, K = 4).
#include "common/device.cuh"
#include "conv/conv.cuh"

namespace deltatune::kernels {
namespace {

__device__ __forceinline__ float conv_pre(KIn x, KIn w, int64_t t, int64_t c, int64_t start, int64_t C, int K) {
  float acc = 0.f;
  for (int j = 0; j < K; ++j) {
    const int64_t src = t - (K - 1) + j;
    if (src >= start) acc += ld(w, c * K + j) * ld(x, src * C + c);
  }
  return acc;
}

__global__ void conv_fwd_kernel(KIn x, KIn w, const int32_t* cu, int nseq, KOut y, int64_t T, int64_t C, int K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    const int64_t start = cu[seq_of_token(cu, nseq, t)];
    st(y, i, siluf_(conv_pre(x, w, t, c, start, C, K)));
  }
}

__global__ void conv_bwd_kernel(KIn dy, KIn x, KIn w, const int32_t* cu, int nseq, KOut dx, int64_t T, int64_t C,
                                int K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tau = i / C, c = i % C;
    const int sq = seq_of_token(cu, nseq, tau);
    const int64_t start = cu[sq], end = cu[sq + 1];
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
      const int64_t t = tau + K - 1 - j;
      if (t >= end) continue;
      const float dpre = ld(dy, t * C + c) * dsiluf_(conv_pre(x, w, t, c, start, C, K));
      acc += ld(w, c * K + j) * dpre;
    }
    st(dx, i, acc);
  }
}

}  // namespace

cudaError_t launch_conv1d_silu_fwd(KIn x, KIn w, const int32_t* cu, int nseq, KOut y, int64_t T, int64_t C, int K,
                                   cudaStream_t s) {
  if (T * C > 0) conv_fwd_kernel<<<grid_for(T * C, 256), 256, 0, s>>>(x, w, cu, nseq, y, T, C, K);
  return cudaGetLastError();
}
cudaError_t launch_conv1d_silu_bwd(KIn dy, KIn x, KIn w, const int32_t* cu, int nseq, KOut dx, int64_t T, int64_t C,
                                   int K, cudaStream_t s) {
  if (T * C > 0) conv_bwd_kernel<<<grid_for(T * C, 256), 256, 0, s>>>(dy, x, w, cu, nseq, dx, T, C, K);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
