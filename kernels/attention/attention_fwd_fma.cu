// Causal (or full: the vision tower) attention forward for packed variable-length sequences with GQA, fp32 FMA
// (the first version; the fallback for non-BF16 inputs, other head dims, full attention, or tiles the device
// cannot take):
//   s_ij = scale·q_i·k_j for keys j ≤ i (every key j when not causal) of the same sequence;  o_i (=) Σ_j softmax_j(s_i)·v_j;
//   lse_i (=) log Σ_j exp(s_ij)  (F32, the scaled scores)
// Query head h reads kv head h / (nH/nKV). The T×T score matrix is never stored: each block owns 16 query
// rows of one head, walks 32-key tiles of its sequence up to the diagonal, and keeps the running max, sum
// and output rows (online softmax) in registers. fp32 FMA math on shared-memory tiles (no tensor cores
// yet); head_dim ≤ 256.
// Memory: Q tile (16, hd+1), K and V tiles (32, hd+1), P (16, 32) in shared memory; row stride hd+1 avoids
// bank conflicts when 8 lanes read 8 different key rows at one column.
#include "attention/attention.cuh"
#include "attention/attention_tile.cuh"
#include "common/launch_smem.cuh"

namespace deltatune::kernels {
namespace {

constexpr int BQ = kAttnTile;  // 16 query rows
constexpr int BK = 32;         // keys per tile
constexpr int NC = BK / 8;     // score columns per thread

template <int MAXD>
__global__ void __launch_bounds__(attn::kThreads) attention_fwd_kernel(
    KIn q,             // (T, nH, hd)
    KIn k,             // (T, nKV, hd)
    KIn v,             // (T, nKV, hd)
    const int32_t* cu, const int32_t* tiles,  // (ntiles, 2)
    int64_t nH, int64_t nKV, int hd, float scale, bool causal,
    KOut o,            // (T, nH, hd)
    float* lse) {      // (T, nH)
  extern __shared__ float smem[];
  const int P = hd + 1;
  float* Qs = smem;          // (BQ, P)
  float* Ks = Qs + BQ * P;   // (BK, P)
  float* Vs = Ks + BK * P;   // (BK, P)
  float* Ps = Vs + BK * P;   // (BQ, BK)
  constexpr int ND = MAXD / 8;

  const int seq = tiles[2 * blockIdx.x], q0 = tiles[2 * blockIdx.x + 1];
  const int h = blockIdx.y;
  const int64_t kvh = h / (nH / nKV);
  const int64_t s0 = cu[seq], s1 = cu[seq + 1];
  const int r = threadIdx.x >> 3, l8 = threadIdx.x & 7;
  const int64_t qi = q0 + r;

  attn::load_tile(Qs, q, q0, BQ, s1, nH, h, hd, scale);
  float acc[ND];
#pragma unroll
  for (int j = 0; j < ND; ++j) acc[j] = 0.f;
  float m = -INFINITY, l = 0.f;

  const int64_t kend = (!causal || s1 < int64_t(q0) + BQ ? s1 : int64_t(q0) + BQ);
  for (int64_t k0 = s0; k0 < kend; k0 += BK) {
    __syncthreads();
    attn::load_tile(Ks, k, k0, BK, s1, nKV, kvh, hd, 1.f);
    attn::load_tile(Vs, v, k0, BK, s1, nKV, kvh, hd, 1.f);
    __syncthreads();
    float sv[NC];
    float tmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
      const int c = l8 + 8 * j;
      const int64_t kj = k0 + c;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += Qs[r * P + d] * Ks[c * P + d];
      sv[j] = (kj < s1 && qi < s1 && (!causal || kj <= qi)) ? dot : -INFINITY;
      tmax = fmaxf(tmax, sv[j]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
    const float m_new = fmaxf(m, tmax);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float corr = expf(m - m_use);  // m = -inf -> 0
    float psum = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
      const float p = expf(sv[j] - m_use);
      Ps[r * BK + l8 + 8 * j] = p;
      psum += p;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    psum += __shfl_xor_sync(0xffffffffu, psum, 2);
    psum += __shfl_xor_sync(0xffffffffu, psum, 4);
    l = l * corr + psum;
    m = m_new;
    __syncwarp();  // the 8 lanes of a row are in one warp
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = l8 + 8 * j;
      if (d < hd) {
        float a = acc[j] * corr;
        for (int c = 0; c < BK; ++c) a += Ps[r * BK + c] * Vs[c * P + d];
        acc[j] = a;
      }
    }
  }
  if (qi < s1) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = l8 + 8 * j;
      if (d < hd) st(o, (qi * nH + h) * hd + d, acc[j] * inv);
    }
    if (l8 == 0) lse[qi * nH + h] = m + logf(l);
  }
}

}  // namespace

size_t attention_fwd_smem(int hd) { return sizeof(float) * (size_t(BQ + 2 * BK) * (hd + 1) + BQ * BK); }

cudaError_t launch_attention_fwd(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens, const int32_t* tiles, int ntiles,
                                 int64_t nH, int64_t nKV, int hd, float scale, bool causal, KOut o, float* lse,
                                 cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  const size_t smem = attention_fwd_smem(hd);
  const dim3 grid(static_cast<unsigned>(ntiles), static_cast<unsigned>(nH));
  auto go = [&](auto kernel) {
    cudaError_t e = set_launch_smem(pol, kernel, smem);
    if (e != cudaSuccess) return e;
    kernel<<<grid, attn::kThreads, smem, s>>>(q, k, v, cu_seqlens, tiles, nH, nKV, hd, scale, causal, o, lse);
    return cudaGetLastError();
  };
  if (hd <= 64) return go(attention_fwd_kernel<64>);
  if (hd <= 128) return go(attention_fwd_kernel<128>);
  return go(attention_fwd_kernel<256>);
}

}  // namespace deltatune::kernels
