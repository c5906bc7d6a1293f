// Gated delta rule backward for the recurrent fp32-state forward of core_fwd.cu. Per (sequence, value
// head), reverse over tokens with dS = ∂L/∂S_t (zero after the last token), Sp = S_{t−1}:
//   w = Spᵀk, u = a·w, δ = β(v − u)                    (forward quantities, recomputed)
//   dδ_c = Σ_i dS[i,c]k_i + (q·k)·do_c                  (dS_total = dS + q doᵀ)
//   dv (=) β·dδ;  dβ (=) Σ_c dδ_c(v_c − u_c);  du = −β·dδ
//   dq_i (=) a·Σ_c Sp[i,c]do_c + k_i(δ·do)              (= S_t do)
//   dk_i (=) Σ_c dS[i,c]δ_c + q_i(δ·do) + a·Σ_c Sp[i,c]du_c
//   da = Σ dS_total⊙Sp + du·w;  dg (=) a·da
//   dS ← a·(dS + q doᵀ + k duᵀ)                          (gradient w.r.t. S_{t−1})
// dq, dk are per value head (F32 (T, HV, dk)) w.r.t. the normalised, scaled inputs; the GVA sum and the
// L2-norm backward follow in l2norm.cu.
// Every term above is a sum over value columns c or acts on one column, so blocks split the columns:
// one block per (n, h, group of kGdnCols columns); dq, dk, dg, dβ are partial sums added with atomics.
// Memory: Phase A runs the forward once and stores the state every kGdnCkpt tokens
// in global scratch (ckpt, F32 (Σ_n ceil(len_n/kGdnCkpt), HV, dk, dv)). Phase B walks the chunks backwards;
// inside a chunk it replays to each kGdnSub-token sub-chunk start (Sc, shared), then for each token of the
// sub-chunk replays from Sc to S_{t−1} (Sp, shared) and applies the step above (dS, shared). Shared
// matrices (dk, kGdnCols+1) have row stride kGdnCols+1 so both the column pass (thread = column) and the row pass (thread = row)
// are free of bank conflicts. Cost: about 7 replayed forward steps per token.
#include "common/device.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

struct Smem {
  float* Sc;   // (dk, P) sub-chunk start state, P = kGdnCols + 1
  float* Sp;   // (dk, P) S_{t-1}
  float* dS;   // (dk, P)
  float* kv;   // (dk)
  float* qv;   // (dk)
  float* dov;  // (kGdnCols)
  float* del;  // (kGdnCols)
  float* duv;  // (kGdnCols)
  float* red;  // (32)
};

// X ← one forward step of token t (local column lc = thread, global column c0 + lc). Starts with a barrier.
__device__ void replay_step(float* X, int P, float* kv, const float* kn, KIn v, const float* g, KIn beta, int64_t t,
                            int64_t HK, int64_t HV, int64_t hk, int h, int dk, int dv, int c0, int cw) {
  __syncthreads();
  for (int i = threadIdx.x; i < dk; i += blockDim.x) kv[i] = kn[(t * HK + hk) * dk + i];
  __syncthreads();
  const int lc = threadIdx.x;
  if (lc < cw) {
    const float a = expf(g[t * HV + h]), be = ld(beta, t * HV + h);
    float w4[4] = {0.f, 0.f, 0.f, 0.f};  // partial sums break the serial dependency chain
    int i = 0;
    for (; i + 4 <= dk; i += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) w4[u] += X[(i + u) * P + lc] * kv[i + u];
    }
    for (; i < dk; ++i) w4[0] += X[i * P + lc] * kv[i];
    const float w = (w4[0] + w4[1]) + (w4[2] + w4[3]);
    const float delta = be * (ld(v, (t * HV + h) * dv + c0 + lc) - a * w);
#pragma unroll 4
    for (i = 0; i < dk; ++i) X[i * P + lc] = a * X[i * P + lc] + kv[i] * delta;
  }
}

__global__ void gdn_core_bwd_kernel(KIn dout,         // (T, HV, dv)
                                    const float* qn,  // (T, HK, dk)
                                    const float* kn,  // (T, HK, dk)
                                    KIn v,            // (T, HV, dv)
                                    const float* g,   // (T, HV)
                                    KIn beta,         // (T, HV)
                                    const int32_t* cu,
                                    float* dqh,       // (T, HV, dk) (+=)
                                    float* dkh,       // (T, HV, dk) (+=)
                                    KOut dv_out,      // (T, HV, dv) (=)
                                    float* dg,        // (T, HV) (+=)
                                    float* dbeta,     // (T, HV) (+=)
                                    float* ckpt, int64_t HK, int64_t HV, int dk, int dv) {
  extern __shared__ float smem[];
  const int P = kGdnCols + 1;
  const int c0 = blockIdx.y * kGdnCols, cw = min(kGdnCols, dv - c0);
  Smem sm;
  sm.Sc = smem;
  sm.Sp = sm.Sc + dk * P;
  sm.dS = sm.Sp + dk * P;
  sm.kv = sm.dS + dk * P;
  sm.qv = sm.kv + dk;
  sm.dov = sm.qv + dk;
  sm.del = sm.dov + kGdnCols;
  sm.duv = sm.del + kGdnCols;
  sm.red = sm.duv + kGdnCols;

  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int64_t hk = h / (HV / HK);
  const int tid = threadIdx.x;
  const int64_t t0 = cu[n], t1 = cu[n + 1];
  int64_t ck0 = 0;  // first checkpoint of sequence n
  for (int m = 0; m < n; ++m) ck0 += (cu[m + 1] - cu[m] + kGdnCkpt - 1) / kGdnCkpt;
  const size_t mat = size_t(dk) * dv;
  auto ck_ptr = [&](int64_t m) { return ckpt + (size_t(ck0 + m) * HV + h) * mat; };

  // Phase A: forward, checkpoint every kGdnCkpt tokens (state before the chunk's first token).
  if (tid < cw)
    for (int i = 0; i < dk; ++i) sm.Sp[i * P + tid] = 0.f;
  for (int64_t t = t0; t < t1; ++t) {
    if ((t - t0) % kGdnCkpt == 0 && tid < cw) {
      float* dst = ck_ptr((t - t0) / kGdnCkpt);
      for (int i = 0; i < dk; ++i) dst[size_t(i) * dv + c0 + tid] = sm.Sp[i * P + tid];
    }
    replay_step(sm.Sp, P, sm.kv, kn, v, g, beta, t, HK, HV, hk, h, dk, dv, c0, cw);
  }

  // Phase B.
  if (tid < cw)
    for (int i = 0; i < dk; ++i) sm.dS[i * P + tid] = 0.f;
  const int64_t nchunks = (t1 - t0 + kGdnCkpt - 1) / kGdnCkpt;
  for (int64_t m = nchunks - 1; m >= 0; --m) {
    const int64_t k0 = t0 + m * kGdnCkpt, k1 = min(t1, k0 + kGdnCkpt);
    const int64_t nsub = (k1 - k0 + kGdnSub - 1) / kGdnSub;
    for (int64_t sb = nsub - 1; sb >= 0; --sb) {
      const int64_t s0 = k0 + sb * kGdnSub, s1 = min(k1, s0 + kGdnSub);
      __syncthreads();
      if (tid < cw) {
        const float* src = ck_ptr(m);
        for (int i = 0; i < dk; ++i) sm.Sc[i * P + tid] = src[size_t(i) * dv + c0 + tid];
      }
      for (int64_t t = k0; t < s0; ++t) replay_step(sm.Sc, P, sm.kv, kn, v, g, beta, t, HK, HV, hk, h, dk, dv, c0, cw);
      for (int64_t t = s1 - 1; t >= s0; --t) {
        __syncthreads();
        if (tid < cw)
          for (int i = 0; i < dk; ++i) sm.Sp[i * P + tid] = sm.Sc[i * P + tid];
        for (int64_t r = s0; r < t; ++r)
          replay_step(sm.Sp, P, sm.kv, kn, v, g, beta, r, HK, HV, hk, h, dk, dv, c0, cw);

        // ---- backward step of token t ----
        __syncthreads();
        for (int i = tid; i < dk; i += blockDim.x) {
          sm.kv[i] = kn[(t * HK + hk) * dk + i];
          sm.qv[i] = qn[(t * HK + hk) * dk + i];
        }
        for (int c = tid; c < cw; c += blockDim.x) sm.dov[c] = ld(dout, (t * HV + h) * dv + c0 + c);
        __syncthreads();
        const float a = expf(g[t * HV + h]), be = ld(beta, t * HV + h);
        float p_dbeta = 0.f, p_ddo = 0.f, p_duw = 0.f;
        if (tid < cw) {
          const int c = tid;
          float w2[2] = {0.f, 0.f}, x2[2] = {0.f, 0.f}, qk2[2] = {0.f, 0.f};
          int i = 0;
          for (; i + 2 <= dk; i += 2) {
#pragma unroll
            for (int u = 0; u < 2; ++u) {
              const float kk = sm.kv[i + u];
              w2[u] += sm.Sp[(i + u) * P + c] * kk;
              x2[u] += sm.dS[(i + u) * P + c] * kk;
              qk2[u] += sm.qv[i + u] * kk;
            }
          }
          for (; i < dk; ++i) {
            const float kk = sm.kv[i];
            w2[0] += sm.Sp[i * P + c] * kk;
            x2[0] += sm.dS[i * P + c] * kk;
            qk2[0] += sm.qv[i] * kk;
          }
          const float w = w2[0] + w2[1], x = x2[0] + x2[1], qk = qk2[0] + qk2[1];
          const float u = a * w;
          const float vc = ld(v, (t * HV + h) * dv + c0 + c);
          const float delta = be * (vc - u);
          const float ddelta = x + qk * sm.dov[c];
          const float du = -be * ddelta;
          st(dv_out, (t * HV + h) * dv + c0 + c, be * ddelta);
          p_dbeta = ddelta * (vc - u);
          p_ddo = delta * sm.dov[c];
          p_duw = du * w;
          sm.del[c] = delta;
          sm.duv[c] = du;
        }
        const float s_dbeta = block_sum(p_dbeta, sm.red);
        const float s_ddo = block_sum(p_ddo, sm.red);
        const float s_duw = block_sum(p_duw, sm.red);
        float p_da = 0.f;
        if (tid < dk) {
          const int i = tid;
          const float qi = sm.qv[i], ki = sm.kv[i];
          float y = 0.f, z = 0.f, pp = 0.f, e = 0.f;
          for (int c = 0; c < cw; ++c) {
            const float sp = sm.Sp[i * P + c], ds = sm.dS[i * P + c];
            const float doc = sm.dov[c], duc = sm.duv[c];
            y += sp * doc;
            z += ds * sm.del[c];
            pp += sp * duc;
            e += ds * sp;
            sm.dS[i * P + c] = a * (ds + qi * doc + ki * duc);
          }
          atomicAdd(dqh + (t * HV + h) * dk + i, a * y + ki * s_ddo);
          atomicAdd(dkh + (t * HV + h) * dk + i, z + qi * s_ddo + a * pp);
          p_da = e + qi * y;
        }
        const float da = block_sum(p_da, sm.red) + s_duw;
        if (tid == 0) {
          atomicAdd(dg + t * HV + h, a * da);
          atomicAdd(dbeta + t * HV + h, s_dbeta);
        }
      }
    }
  }
}

}  // namespace

int64_t gdn_core_bwd_ckpt_floats(const int32_t* cu, int nseq, int64_t HV, int dk, int dv) {
  int64_t chunks = 0;
  for (int n = 0; n < nseq; ++n) chunks += (cu[n + 1] - cu[n] + kGdnCkpt - 1) / kGdnCkpt;
  return chunks * HV * dk * dv;
}

size_t gdn_core_bwd_smem(int dk, int dv) {
  return sizeof(float) * (3 * size_t(dk) * (kGdnCols + 1) + 2 * size_t(dk) + 3 * size_t(kGdnCols) + 32);
}

cudaError_t launch_gdn_core_bwd(KIn dout, const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                                const int32_t* cu_seqlens, int nseq, float* dqh, float* dkh, KOut dv_out, float* dg,
                                float* dbeta, float* ckpt, int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s) {
  const size_t smem = gdn_core_bwd_smem(dk, dv);
  cudaError_t e = cudaFuncSetAttribute(gdn_core_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int threads = (((dk > kGdnCols ? dk : kGdnCols) + 31) / 32) * 32;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>((dv + kGdnCols - 1) / kGdnCols));
  if (nseq > 0 && HV > 0)
    gdn_core_bwd_kernel<<<grid, threads, smem, s>>>(
        dout, qn, kn, v, g, beta, cu_seqlens, dqh, dkh, dv_out, dg, dbeta, ckpt, HK, HV, dk, dv);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
