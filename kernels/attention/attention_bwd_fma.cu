// Causal (or full: the vision tower) attention backward for packed variable-length sequences with GQA, fp32 FMA
// (the first version; the fallback for non-BF16 inputs, other head dims, full attention, or tiles the device
// cannot take). With s_ij = scale·q_i·k_j (j ≤ i, or every j when not causal; same sequence), p_ij = exp(s_ij − lse_i), D_i = Σ_d do_i·o_i:
//   dv_j (=) Σ_i p_ij·do_i                        dp_ij = do_i·v_j
//   ds_ij = p_ij·(dp_ij − D_i)
//   dq_i (=) scale·Σ_j ds_ij·k_j                   dk_j (=) scale·Σ_i ds_ij·q_i
// dk, dv of a kv head sum over the nH/nKV query heads that read it.
// Three kernels, no atomics (deterministic): D per (token, head); dK/dV per (16-key tile, kv head) walking
// the query tiles of the sequence from the diagonal on; dQ per (16-query tile, head) walking key tiles up
// to the diagonal. P is recomputed in each from lse. fp32 FMA math on shared-memory tiles.
// Memory (dK/dV block): K, V (16, hd+1), Q, dO (32, hd+1), P, dS (16, 32) in shared memory; the dQ block
// mirrors the forward's layout with dO added.
#include "attention/attention.cuh"
#include "attention/attention_tile.cuh"
#include "common/launch_smem.cuh"

namespace deltatune::kernels {
namespace {

constexpr int BT = kAttnTile;  // 16 rows owned by a block
// Rows of the walked query tiles in the dK/dV kernel: 32, or 16 where 32 would not fit 99 KiB (hd > 248;
// every kernel within kPortableSmemPerBlock); the dQ kernel walks 32-row key tiles.
constexpr int BW = 32;
size_t dkdv_smem(int hd, int bw) { return sizeof(float) * (size_t(2 * BT + 2 * bw) * (hd + 1) + 2 * BT * bw + 2 * bw); }
int dkdv_walk(int hd) { return dkdv_smem(hd, BW) <= kPortableSmemPerBlock ? BW : 16; }

// dl[t, h] (=) Σ_d dout·o; one warp per (t, h).
__global__ void attn_dot_kernel(KIn dout, KIn o, float* dl, int64_t rows, int hd) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float acc = 0.f;
  for (int d = lane; d < hd; d += 32) acc += ld(dout, row * hd + d) * ld(o, row * hd + d);
  acc = warp_sum(acc);
  if (lane == 0) dl[row] = acc;
}

template <int MAXD, int BW>
__global__ void __launch_bounds__(attn::kThreads) attention_dkdv_kernel(
    KIn dout,         // (T, nH, hd)
    KIn q,            // (T, nH, hd)
    KIn k,            // (T, nKV, hd)
    KIn v,            // (T, nKV, hd)
    const float* lse, // (T, nH)
    const float* dl,  // (T, nH)
    const int32_t* cu, const int32_t* tiles, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
    KOut dk,          // (T, nKV, hd)
    KOut dv) {        // (T, nKV, hd)
  extern __shared__ float smem[];
  const int P = hd + 1;
  float* Ks = smem;           // (BT, P)
  float* Vs = Ks + BT * P;    // (BT, P)
  float* Qs = Vs + BT * P;    // (BW, P)
  float* Ds = Qs + BW * P;    // (BW, P) dO
  float* Ps = Ds + BW * P;    // (BT, BW)
  float* Ss = Ps + BT * BW;   // (BT, BW) dS
  float* Ls = Ss + BT * BW;   // (BW) lse
  float* Dl = Ls + BW;        // (BW) D
  constexpr int ND = MAXD / 8;
  constexpr int NC = BW / 8;

  const int seq = tiles[2 * blockIdx.x], k0 = tiles[2 * blockIdx.x + 1];
  const int64_t g = blockIdx.y;
  const int64_t rep = nH / nKV;
  const int64_t s0 = cu[seq], s1 = cu[seq + 1];
  const int r = threadIdx.x >> 3, l8 = threadIdx.x & 7;
  const int64_t kj = k0 + r;

  attn::load_tile(Ks, k, k0, BT, s1, nKV, g, hd, 1.f);
  attn::load_tile(Vs, v, k0, BT, s1, nKV, g, hd, 1.f);
  float adk[ND], adv[ND];
#pragma unroll
  for (int j = 0; j < ND; ++j) adk[j] = adv[j] = 0.f;

  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    for (int64_t q0 = causal ? k0 : s0; q0 < s1; q0 += BW) {
      __syncthreads();
      attn::load_tile(Qs, q, q0, BW, s1, nH, h, hd, 1.f);
      attn::load_tile(Ds, dout, q0, BW, s1, nH, h, hd, 1.f);
      for (int i = threadIdx.x; i < BW; i += blockDim.x) {
        const int64_t t = q0 + i;
        Ls[i] = t < s1 ? lse[t * nH + h] : 0.f;
        Dl[i] = t < s1 ? dl[t * nH + h] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int jj = 0; jj < NC; ++jj) {
        const int c = l8 + 8 * jj;
        const int64_t qi = q0 + c;
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < hd; ++d) {
          s += Ks[r * P + d] * Qs[c * P + d];
          dp += Vs[r * P + d] * Ds[c * P + d];
        }
        const bool valid = kj < s1 && qi < s1 && (!causal || kj <= qi);
        const float p = valid ? expf(scale * s - Ls[c]) : 0.f;
        Ps[r * BW + c] = p;
        Ss[r * BW + c] = p * (dp - Dl[c]);
      }
      __syncwarp();
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        const int d = l8 + 8 * j;
        if (d < hd) {
          float a = adv[j], b = adk[j];
          for (int c = 0; c < BW; ++c) {
            a += Ps[r * BW + c] * Ds[c * P + d];
            b += Ss[r * BW + c] * Qs[c * P + d];
          }
          adv[j] = a;
          adk[j] = b;
        }
      }
    }
  }
  if (kj < s1) {
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = l8 + 8 * j;
      if (d < hd) {
        st(dv, (kj * nKV + g) * hd + d, adv[j]);
        st(dk, (kj * nKV + g) * hd + d, scale * adk[j]);
      }
    }
  }
}

template <int MAXD>
__global__ void __launch_bounds__(attn::kThreads) attention_dq_kernel(
    KIn dout,         // (T, nH, hd)
    KIn q,            // (T, nH, hd)
    KIn k,            // (T, nKV, hd)
    KIn v,            // (T, nKV, hd)
    const float* lse, // (T, nH)
    const float* dl,  // (T, nH)
    const int32_t* cu, const int32_t* tiles, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
    KOut dq) {        // (T, nH, hd)
  extern __shared__ float smem[];
  const int P = hd + 1;
  float* Qs = smem;          // (BT, P)
  float* Ds = Qs + BT * P;   // (BT, P)
  float* Ks = Ds + BT * P;   // (BW, P)
  float* Vs = Ks + BW * P;   // (BW, P)
  float* Ss = Vs + BW * P;   // (BT, BW)
  constexpr int ND = MAXD / 8;

  const int seq = tiles[2 * blockIdx.x], q0 = tiles[2 * blockIdx.x + 1];
  const int h = blockIdx.y;
  const int64_t kvh = h / (nH / nKV);
  const int64_t s0 = cu[seq], s1 = cu[seq + 1];
  const int r = threadIdx.x >> 3, l8 = threadIdx.x & 7;
  const int64_t qi = q0 + r;
  attn::load_tile(Qs, q, q0, BT, s1, nH, h, hd, 1.f);
  attn::load_tile(Ds, dout, q0, BT, s1, nH, h, hd, 1.f);
  const float Lq = qi < s1 ? lse[qi * nH + h] : 0.f;
  const float Dq = qi < s1 ? dl[qi * nH + h] : 0.f;
  float acc[ND];
#pragma unroll
  for (int j = 0; j < ND; ++j) acc[j] = 0.f;

  const int64_t kend = (!causal || s1 < int64_t(q0) + BT ? s1 : int64_t(q0) + BT);
  for (int64_t k0 = s0; k0 < kend; k0 += BW) {
    __syncthreads();
    attn::load_tile(Ks, k, k0, BW, s1, nKV, kvh, hd, 1.f);
    attn::load_tile(Vs, v, k0, BW, s1, nKV, kvh, hd, 1.f);
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < BW / 8; ++jj) {
      const int c = l8 + 8 * jj;
      const int64_t kj = k0 + c;
      float s = 0.f, dp = 0.f;
      for (int d = 0; d < hd; ++d) {
        s += Qs[r * P + d] * Ks[c * P + d];
        dp += Ds[r * P + d] * Vs[c * P + d];
      }
      const bool valid = qi < s1 && kj < s1 && (!causal || kj <= qi);
      const float p = valid ? expf(scale * s - Lq) : 0.f;
      Ss[r * BW + c] = p * (dp - Dq);
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = l8 + 8 * j;
      if (d < hd) {
        float a = acc[j];
        for (int c = 0; c < BW; ++c) a += Ss[r * BW + c] * Ks[c * P + d];
        acc[j] = a;
      }
    }
  }
  if (qi < s1) {
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = l8 + 8 * j;
      if (d < hd) st(dq, (qi * nH + h) * hd + d, scale * acc[j]);
    }
  }
}

size_t dq_smem(int hd) { return sizeof(float) * (size_t(2 * BT + 2 * BW) * (hd + 1) + BT * BW); }

template <int MAXD>
cudaError_t run_bwd(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse, const float* dl, const int32_t* cu,
                    const int32_t* tiles, int ntiles, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
                    KOut dq, KOut dk, KOut dv, cudaStream_t s) {
  const int bw = dkdv_walk(hd);
  const size_t sm1 = dkdv_smem(hd, bw), sm2 = dq_smem(hd);
  auto* kv_kernel = bw == BW ? attention_dkdv_kernel<MAXD, BW> : attention_dkdv_kernel<MAXD, 16>;
  cudaError_t e = set_launch_smem(pol, kv_kernel, sm1);
  if (e != cudaSuccess) return e;
  e = set_launch_smem(pol, attention_dq_kernel<MAXD>, sm2);
  if (e != cudaSuccess) return e;
  kv_kernel<<<dim3(ntiles, static_cast<unsigned>(nKV)), attn::kThreads, sm1, s>>>(dout, q, k, v, lse, dl, cu, tiles,
                                                                                 nH, nKV, hd, scale, causal, dk, dv);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attention_dq_kernel<MAXD><<<dim3(ntiles, static_cast<unsigned>(nH)), attn::kThreads, sm2, s>>>(
      dout, q, k, v, lse, dl, cu, tiles, nH, nKV, hd, scale, causal, dq);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_dot(KIn dout, KIn o, float* dl, int64_t rows, int hd, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  attn_dot_kernel<<<grid_for(rows * 32, 256, int64_t(1) << 30), 256, 0, s>>>(dout, o, dl, rows, hd);
  return cudaGetLastError();
}

size_t attention_bwd_smem(int hd) {
  const size_t a = dkdv_smem(hd, dkdv_walk(hd));
  return a > dq_smem(hd) ? a : dq_smem(hd);
}

cudaError_t launch_attention_bwd(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, KIn o, const float* lse, float* dl,
                                 const int32_t* cu_seqlens, const int32_t* tiles, int ntiles, int64_t T, int64_t nH,
                                 int64_t nKV, int hd, float scale, bool causal, KOut dq, KOut dk, KOut dv,
                                 cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  cudaError_t e = launch_attention_dot(dout, o, dl, T * nH, hd, s);
  if (e != cudaSuccess) return e;
  if (hd <= 64) return run_bwd<64>(pol, dout, q, k, v, lse, dl, cu_seqlens, tiles, ntiles, nH, nKV, hd, scale, causal, dq, dk, dv, s);
  if (hd <= 128)
    return run_bwd<128>(pol, dout, q, k, v, lse, dl, cu_seqlens, tiles, ntiles, nH, nKV, hd, scale, causal, dq, dk, dv, s);
  return run_bwd<256>(pol, dout, q, k, v, lse, dl, cu_seqlens, tiles, ntiles, nH, nKV, hd, scale, causal, dq, dk, dv, s);
}

}  // namespace deltatune::kernels
