// Gated delta rule forward, first (recurrent) version with fp32 state (spec §3.4 step 8, §4.1):
// per (sequence n, value head h), S = 0 (dk × dv); for each token t of the sequence:
//   a = e^{g_t};  w = Sᵀk̂_t;  δ = β_t·(v_t − a·w);  S ← a·S + k̂_t δᵀ;  o_t (=) Sᵀq_t
// where q_t = scale·q̂_t, k̂_t come L2-normalised in fp32 (l2norm.cu); key head = h / (HV/HK).
// This is algebraically the chunked algorithm of §4.2 evaluated one token at a time; the tensor-core
// chunked kernel replaces it later.
// Memory: the columns of S evolve independently, so one block per (n, h, group of kGdnCols value columns);
// its slice of S lives in shared memory (F32 (dk, kGdnCols)); thread c owns column c, so the column
// recurrences need no barrier; k̂_t, q_t are staged in shared memory per token.
#include "common/device.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

__global__ void gdn_core_fwd_kernel(const float* qn,  // (T, HK, dk)
                                    const float* kn,  // (T, HK, dk)
                                    KIn v,            // (T, HV, dv)
                                    const float* g,   // (T, HV)
                                    KIn beta,         // (T, HV)
                                    const int32_t* cu, KOut o,  // (T, HV, dv)
                                    int64_t HK, int64_t HV, int dk, int dv) {
  extern __shared__ float smem[];
  float* S = smem;                  // (dk, kGdnCols)
  float* kv = S + dk * kGdnCols;    // (dk)
  float* qv = kv + dk;              // (dk)
  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int64_t hk = h / (HV / HK);
  const int lc = threadIdx.x, c = blockIdx.y * kGdnCols + lc;
  const int64_t t0 = cu[n], t1 = cu[n + 1];
  if (c < dv)
    for (int i = 0; i < dk; ++i) S[i * kGdnCols + lc] = 0.f;
  for (int64_t t = t0; t < t1; ++t) {
    __syncthreads();
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      kv[i] = kn[(t * HK + hk) * dk + i];
      qv[i] = qn[(t * HK + hk) * dk + i];
    }
    __syncthreads();
    if (c >= dv) continue;
    const float a = expf(g[t * HV + h]), be = ld(beta, t * HV + h);
    // Four partial sums: the per-token dot products are a serial dependency chain otherwise.
    float w4[4] = {0.f, 0.f, 0.f, 0.f};
    int i = 0;
    for (; i + 4 <= dk; i += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) w4[u] += S[(i + u) * kGdnCols + lc] * kv[i + u];
    }
    for (; i < dk; ++i) w4[0] += S[i * kGdnCols + lc] * kv[i];
    const float w = (w4[0] + w4[1]) + (w4[2] + w4[3]);
    const float delta = be * (ld(v, (t * HV + h) * dv + c) - a * w);
    float o4[4] = {0.f, 0.f, 0.f, 0.f};
    for (i = 0; i + 4 <= dk; i += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float sv = a * S[(i + u) * kGdnCols + lc] + kv[i + u] * delta;
        S[(i + u) * kGdnCols + lc] = sv;
        o4[u] += sv * qv[i + u];
      }
    }
    for (; i < dk; ++i) {
      const float sv = a * S[i * kGdnCols + lc] + kv[i] * delta;
      S[i * kGdnCols + lc] = sv;
      o4[0] += sv * qv[i];
    }
    st(o, (t * HV + h) * dv + c, (o4[0] + o4[1]) + (o4[2] + o4[3]));
  }
}

}  // namespace

size_t gdn_core_fwd_smem(int dk, int dv) { return sizeof(float) * (size_t(dk) * kGdnCols + 2 * size_t(dk)); }

cudaError_t launch_gdn_core_fwd(const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                                const int32_t* cu_seqlens, int nseq, KOut o, int64_t HK, int64_t HV, int dk, int dv,
                                cudaStream_t s) {
  const size_t smem = gdn_core_fwd_smem(dk, dv);
  cudaError_t e = cudaFuncSetAttribute(gdn_core_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>((dv + kGdnCols - 1) / kGdnCols));
  if (nseq > 0 && HV > 0)
    gdn_core_fwd_kernel<<<grid, kGdnCols, smem, s>>>(qn, kn, v, g, beta, cu_seqlens, o,
                                                                                HK, HV, dk, dv);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
