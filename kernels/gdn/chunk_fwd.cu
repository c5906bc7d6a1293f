// Gated delta rule forward, chunked (spec §4.2, chunk C = 64), fp32 arithmetic.
//
// Two kernels:
//  1. gdn_chunk_prep (one block per (chunk, value head), all chunks in parallel): chunk-local cumulative
//     log decay G, A_ij = β_i (k̂_i·k̂_j) e^{G_i−G_j} (i > j), T = (I + A)^{-1} by forward substitution,
//     W = T·diag(βγ)·K̂, U = T·diag(β)·V, and the causal intra-chunk scores M_ij = (q̂_i·k̂_j) e^{G_i−G_j}
//     (i ≥ j). Results go to fp32 scratch.
//  2. gdn_chunk_scan (one block per (sequence, value head, tile of kChunkBV value columns); chunks of the
//     sequence in order): the columns of the state S evolve independently, so each block keeps its
//     S[:, tile] (dk × BV, fp32) in shared memory and per chunk computes V' = U − W·S,
//     O = diag(γ)·Q̂·S + M·V', S ← Γ·S + K̂ᵀ·diag(Γ/γ)·V'.
// The serial dependency is one step per 64 tokens instead of one per token (core_fwd.cu).
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

constexpr int C = kGdnChunk;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) gdn_chunk_prep_kernel(
    const float* qn, const float* kn, KIn v, const float* g, KIn beta, const int32_t* chunks, float* W, float* U,
    float* M, float* Gc, float* Tout, int64_t HK, int64_t HV, int dk, int dv) {
  extern __shared__ __align__(16) float sm[];
  const int ldk = dk + 1, ldx = (dk > dv ? dk : dv) + 1;
  float* K = sm;                 // [C][ldk]
  float* X = K + C * ldk;        // [C][ldx]: V, then Q̂
  float* A = X + C * ldx;        // [C][C+1]
  float* Tm = A + C * (C + 1);   // [C][C+1]
  float* G = Tm + C * (C + 1);   // [C]
  float* B = G + C;              // [C] β
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int64_t t0 = chunks[2 * ch];
  const int len = chunks[2 * ch + 1];
  const int64_t hk = h / (HV / HK);
  for (int idx = tid; idx < C * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    K[i * ldk + d] = i < len ? kn[((t0 + i) * HK + hk) * dk + d] : 0.f;
  }
  for (int idx = tid; idx < C * dv; idx += kThreads) {
    const int i = idx / dv, d = idx % dv;
    X[i * ldx + d] = i < len ? ld(v, ((t0 + i) * HV + h) * dv + d) : 0.f;
  }
  if (tid < C) {
    B[tid] = tid < len ? ld(beta, (t0 + tid) * HV + h) : 0.f;
    G[tid] = tid < len ? g[(t0 + tid) * HV + h] : 0.f;
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < len; ++i) G[i] += G[i - 1];
  __syncthreads();
  if (tid < len) Gc[(t0 + tid) * HV + h] = G[tid];
  // A (strictly lower), ratios only for i > j so the exponent is ≤ 0.
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float a = 0.f;
    if (i > j && i < len) {
      float s = 0.f;
      for (int d = 0; d < dk; ++d) s += K[i * ldk + d] * K[j * ldk + d];
      a = B[i] * s * expf(G[i] - G[j]);
    }
    A[i * (C + 1) + j] = a;
  }
  __syncthreads();
  // T = (I + A)^{-1}: row i = e_i − Σ_{j<i} A_ij·row j (unit lower triangular). Rows depend on the rows
  // above, so they go in order; each column's dot product is split over 4 adjacent lanes.
  static_assert(kThreads == 4 * C, "the solve uses 4 threads per column");
  {
    const int c = tid >> 2, part = tid & 3;
    for (int i = 0; i < C; ++i) {
      float s = 0.f;
      if (c < i && i < len)
        for (int j = c + part; j < i; j += 4) s += A[i * (C + 1) + j] * Tm[j * (C + 1) + c];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (part == 0) Tm[i * (C + 1) + c] = c == i ? 1.f : (c < i && i < len ? -s : 0.f);
      __syncthreads();
    }
  }
  if (Tout) {  // for the backward's WY step
    float* To = Tout + (static_cast<int64_t>(ch) * HV + h) * C * C;
    for (int p = tid; p < C * C; p += kThreads) To[p] = Tm[(p / C) * (C + 1) + p % C];
  }
  // W = T·diag(βγ)·K̂ and U = T·diag(β)·V (rows of the chunk only).
  float* Bg = A;  // A is no longer needed: β_j·γ_j
  if (tid < C) Bg[tid] = B[tid] * expf(G[tid]);
  __syncthreads();
  for (int idx = tid; idx < len * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    float s = 0.f;
    for (int j = 0; j <= i; ++j) s += Tm[i * (C + 1) + j] * Bg[j] * K[j * ldk + d];
    W[((t0 + i) * HV + h) * dk + d] = s;
  }
  for (int idx = tid; idx < len * dv; idx += kThreads) {
    const int i = idx / dv, d = idx % dv;
    float s = 0.f;
    for (int j = 0; j <= i; ++j) s += Tm[i * (C + 1) + j] * B[j] * X[j * ldx + d];
    U[((t0 + i) * HV + h) * dv + d] = s;
  }
  __syncthreads();
  for (int idx = tid; idx < C * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    X[i * ldx + d] = i < len ? qn[((t0 + i) * HK + hk) * dk + d] : 0.f;
  }
  __syncthreads();
  float* Mo = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float m = 0.f;
    if (i >= j && i < len) {
      float s = 0.f;
      for (int d = 0; d < dk; ++d) s += X[i * ldx + d] * K[j * ldk + d];
      m = s * expf(G[i] - G[j]);
    }
    Mo[p] = m;
  }
}

template <int BV>
__global__ void __launch_bounds__(kThreads) gdn_chunk_scan_kernel(
    const float* qn, const float* kn, const float* W, const float* U, const float* M, const float* Gc,
    const int32_t* chunks, const int32_t* chunk_off, KOut o, float* states, float* vnew, int64_t HK, int64_t HV, int dk,
    int dv) {
  extern __shared__ __align__(16) float sm[];
  const int ldk = dk + 1;
  float* S = sm;                // [dk][BV]
  float* Ws = S + dk * BV;      // [C][ldk]
  float* Qs = Ws + C * ldk;     // [C][ldk]
  float* Ks = Qs + C * ldk;     // [C][ldk]
  float* Vp = Ks + C * ldk;     // [C][BV]
  float* Ms = Vp + C * BV;      // [C][C+1]
  float* G = Ms + C * (C + 1);  // [C]
  float* Dc = G + C;            // [C] Γ/γ_j = e^{G_last − G_j}
  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int tid = threadIdx.x, lc = tid % BV, row0 = tid / BV;  // 256 threads = RS rows × BV columns
  constexpr int RS = kThreads / BV;
  const bool col_ok = c0 + lc < dv;
  for (int idx = tid; idx < dk * BV; idx += kThreads) S[idx] = 0.f;
  for (int ch = chunk_off[n]; ch < chunk_off[n + 1]; ++ch) {
    const int64_t t0 = chunks[2 * ch];
    const int len = chunks[2 * ch + 1];
    __syncthreads();  // the previous chunk's readers are done with the tiles
    if (states) {     // chunk-start state for the backward pass: (chunk, HV, dk, dv)
      float* st_out = states + (static_cast<int64_t>(ch) * HV + h) * dk * dv;
      for (int idx = tid; idx < dk * BV; idx += kThreads)
        if (c0 + idx % BV < dv) st_out[(idx / BV) * dv + c0 + idx % BV] = S[idx];
    }
    for (int idx = tid; idx < C * dk; idx += kThreads) {
      const int i = idx / dk, d = idx % dk;
      const bool ok = i < len;
      Ws[i * ldk + d] = ok ? W[((t0 + i) * HV + h) * dk + d] : 0.f;
      Qs[i * ldk + d] = ok ? qn[((t0 + i) * HK + hk) * dk + d] : 0.f;
      Ks[i * ldk + d] = ok ? kn[((t0 + i) * HK + hk) * dk + d] : 0.f;
    }
    const float* Mi = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
    for (int p = tid; p < C * C; p += kThreads) Ms[(p / C) * (C + 1) + p % C] = Mi[p];
    if (tid < C) G[tid] = tid < len ? Gc[(t0 + tid) * HV + h] : 0.f;
    __syncthreads();
    if (tid < C) Dc[tid] = tid < len ? expf(G[len - 1] - G[tid]) : 0.f;
    // V' = U − W·S and the inter-chunk read Q̂·S (old S).
    float vp[C / RS], qs[C / RS];
#pragma unroll
    for (int r = 0; r < C / RS; ++r) vp[r] = qs[r] = 0.f;
    for (int d = 0; d < dk; ++d) {
      const float s = S[d * BV + lc];
#pragma unroll
      for (int r = 0; r < C / RS; ++r) {
        const int i = row0 + r * RS;
        vp[r] += Ws[i * ldk + d] * s;
        qs[r] += Qs[i * ldk + d] * s;
      }
    }
#pragma unroll
    for (int r = 0; r < C / RS; ++r) {
      const int i = row0 + r * RS;
      const float u = (i < len && col_ok) ? U[((t0 + i) * HV + h) * dv + c0 + lc] : 0.f;
      Vp[i * BV + lc] = i < len ? u - vp[r] : 0.f;
      if (vnew && i < len && col_ok) vnew[((t0 + i) * HV + h) * dv + c0 + lc] = u - vp[r];
    }
    __syncthreads();
    // O = diag(γ)·Q̂·S + M·V'.
#pragma unroll
    for (int r = 0; r < C / RS; ++r) {
      const int i = row0 + r * RS;
      if (i >= len || !col_ok || !o.p) continue;
      float s = 0.f;
      for (int j = 0; j <= i; ++j) s += Ms[i * (C + 1) + j] * Vp[j * BV + lc];
      st(o, ((t0 + i) * HV + h) * dv + c0 + lc, expf(G[i]) * qs[r] + s);
    }
    // S ← Γ·S + K̂ᵀ·diag(Γ/γ)·V'.
    const float Gl = G[len - 1], Gam = expf(Gl);
    for (int d = row0; d < dk; d += RS) {
      float s = 0.f;
      for (int j = 0; j < len; ++j) s += Ks[j * ldk + d] * Dc[j] * Vp[j * BV + lc];
      S[d * BV + lc] = Gam * S[d * BV + lc] + s;
    }
  }
}

}  // namespace

#ifndef DT_ATTN_EMU  // host side: not part of the host emulation build (dev/emu/gdn)
int gdn_scan_tile_cols(int64_t pairs, int dv, int sms) {
  // Only when the doubled grid still fits in one wave (measured: 128 -> 256 blocks on 132 SMs is slower).
  return 2 * pairs * ((dv + kChunkBV - 1) / kChunkBV) <= sms ? kChunkBV / 2 : kChunkBV;
}

#endif  // DT_ATTN_EMU

size_t gdn_chunk_prep_smem(int dk, int dv) {
  const int ldx = (dk > dv ? dk : dv) + 1;
  return sizeof(float) * (size_t(C) * (dk + 1) + size_t(C) * ldx + 2 * size_t(C) * (C + 1) + 2 * C);
}
size_t gdn_chunk_scan_smem(int dk, int dv) {
  (void)dv;
  return sizeof(float) * (size_t(dk) * kChunkBV + 3 * size_t(C) * (dk + 1) + size_t(C) * kChunkBV +
                          size_t(C) * (C + 1) + 2 * C);
}

#ifndef DT_ATTN_EMU
cudaError_t launch_gdn_chunk_fwd(const KernelPolicy& pol, const float* qn, const float* kn, KIn v,
                                 const float* g, KIn beta, const int32_t* chunks, int nchunks,
                                 const int32_t* chunk_off, int nseq, KOut o, float* W, float* U, float* M,
                                 float* Gc, float* states, int64_t HK, int64_t HV, int dk, int dv,
                                 cudaStream_t s, float* Tout, float* vnew) {
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  const size_t s1 = gdn_chunk_prep_smem(dk, dv), s2 = gdn_chunk_scan_smem(dk, dv);
  cudaError_t e = set_launch_smem(pol, gdn_chunk_prep_kernel, s1);
  if (e != cudaSuccess) return e;
  e = set_launch_smem(pol, gdn_chunk_scan_kernel<kChunkBV>, s2);
  if (e == cudaSuccess) e = set_launch_smem(pol, gdn_chunk_scan_kernel<kChunkBV / 2>, s2);
  if (e != cudaSuccess) return e;
  gdn_chunk_prep_kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), kThreads, s1, s>>>(
      qn, kn, v, g, beta, chunks, W, U, M, Gc, Tout, HK, HV, dk, dv);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  // The scan is serial over chunks: with few (sequence, head) pairs, narrower column tiles fill the GPU.
  const int bv = gdn_scan_tile_cols(nseq * HV, dv, pol.sm_count);
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>((dv + bv - 1) / bv));
  auto* scan = bv == kChunkBV ? gdn_chunk_scan_kernel<kChunkBV> : gdn_chunk_scan_kernel<kChunkBV / 2>;
  scan<<<grid, kThreads, s2, s>>>(qn, kn, W, U, M, Gc, chunks, chunk_off, o, states, vnew, HK, HV, dk, dv);
  return cudaGetLastError();
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
