// Gated delta rule backward, chunked (spec §4.3, chunk C = 64), fp32 arithmetic. Runs after
// launch_gdn_chunk_fwd recomputed, per chunk and value head: G (chunk-local cumsum), T = (I + A)^{-1},
// W, the causal scores M, the chunk-start states S_n and the corrected values V'. q̂ arrives scaled, so
// the spec's s is 1 here. Four kernels:
//  1. dscan (per sequence, value head, 32-column tile; chunks in reverse): dh[n] = dS^end,
//     dV' = Mᵀ·dO + diag(Γ/γ)·K̂·dS^end, dS ← Γ·dS^end + (diag(γ)Q̂)ᵀ·dO − Wᵀ·dV'.
//  2. state products (per chunk, head; streams S_n and dh[n] over value tiles): dQ̂ (=) diag(γ)·dO·S_nᵀ,
//     dK̂ (=) diag(Γ/γ)·V'·dS^endᵀ, dW = −dV'·S_nᵀ (into W's buffer), and the last row's extra dG term
//     Γ·Σ(S_n ⊙ dS^end) + Σ(dK̂_state ⊙ K̂).
//  3. intra (per chunk, head): D = tril(dO·V'ᵀ ⊙ e^{G_i−G_j}), dQ̂ += D·K̂, dK̂ += Dᵀ·Q̂,
//     dG (=) rowsum(dQ̂⊙Q̂) − rowsum(dK̂⊙K̂).
//  4. WY backward (per chunk, head): dT, dA = tril(−Tᵀ·dT·Tᵀ), Xw = Tᵀ·dW, Xu = Tᵀ·dU, then dV, dβ,
//     the rest of dK̂ and dG, and dg = reverse cumsum of dG within the chunk.
// The decomposition was checked in fp64 against the spec's oracle (max rel. error 5e-16).
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

constexpr int C = kGdnChunk;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;

// ---- 1. reverse scan over chunks ------------------------------------------------------------------------
template <int BV>
__global__ void __launch_bounds__(kThreads) gdn_chunk_dscan_kernel(
    KIn dout, const float* qn, const float* kn, const float* W, const float* M, const float* Gc, const int32_t* chunks,
    const int32_t* chunk_off, float* dh, float* dvn, int64_t HK, int64_t HV, int dk, int dv) {
  constexpr int RS = kThreads / BV;
  extern __shared__ __align__(16) float sm[];
  const int ldk = dk + 1;
  float* dS = sm;                // [dk][BV]
  float* Ws = dS + dk * BV;      // [C][ldk]
  float* Qs = Ws + C * ldk;      // [C][ldk]
  float* Ks = Qs + C * ldk;      // [C][ldk]
  float* dO = Ks + C * ldk;      // [C][BV]
  float* dV = dO + C * BV;       // [C][BV]
  float* Ms = dV + C * BV;       // [C][C+1]
  float* G = Ms + C * (C + 1);   // [C]
  float* Eg = G + C;             // [C] γ_i = e^{G_i}
  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int tid = threadIdx.x, lc = tid % BV, row0 = tid / BV;
  const bool col_ok = c0 + lc < dv;
  for (int idx = tid; idx < dk * BV; idx += kThreads) dS[idx] = 0.f;
  for (int ch = chunk_off[n + 1] - 1; ch >= chunk_off[n]; --ch) {
    const ChunkRef cr = chunk_at(chunks, ch);
    __syncthreads();  // dS is final for this chunk; the tiles' previous readers are done
    float* dh_out = dh + (static_cast<int64_t>(ch) * HV + h) * dk * dv;
    for (int idx = tid; idx < dk * BV; idx += kThreads)
      if (c0 + idx % BV < dv) dh_out[(idx / BV) * dv + c0 + idx % BV] = dS[idx];
    for (int idx = tid; idx < C * dk; idx += kThreads) {
      const int i = idx / dk, d = idx % dk;
      const bool ok = i < cr.len;
      Ws[i * ldk + d] = ok ? W[((cr.t0 + i) * HV + h) * dk + d] : 0.f;
      Qs[i * ldk + d] = ok ? qn[((cr.t0 + i) * HK + hk) * dk + d] : 0.f;
      Ks[i * ldk + d] = ok ? kn[((cr.t0 + i) * HK + hk) * dk + d] : 0.f;
    }
    for (int idx = tid; idx < C * BV; idx += kThreads) {
      const int i = idx / BV, c = idx % BV;
      dO[idx] = (i < cr.len && c0 + c < dv) ? ld(dout, ((cr.t0 + i) * HV + h) * dv + c0 + c) : 0.f;
    }
    const float* Mi = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
    for (int p = tid; p < C * C; p += kThreads) Ms[(p / C) * (C + 1) + p % C] = Mi[p];
    if (tid < C) {
      G[tid] = tid < cr.len ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
      Eg[tid] = tid < cr.len ? expf(G[tid]) : 0.f;
    }
    __syncthreads();
    const float Gl = G[cr.len - 1];
    // dV' = Mᵀ·dO + diag(Γ/γ)·K̂·dS^end
#pragma unroll
    for (int r = 0; r < C / RS; ++r) {
      const int i = row0 + r * RS;
      float val = 0.f;
      if (i < cr.len) {
        float a = 0.f, b = 0.f;
        for (int j = i; j < cr.len; ++j) a += Ms[j * (C + 1) + i] * dO[j * BV + lc];
        for (int d = 0; d < dk; ++d) b += Ks[i * ldk + d] * dS[d * BV + lc];
        val = a + expf(Gl - G[i]) * b;
        if (col_ok) dvn[((cr.t0 + i) * HV + h) * dv + c0 + lc] = val;
      }
      dV[i * BV + lc] = val;
    }
    __syncthreads();
    // dS ← Γ·dS^end + (diag(γ)Q̂)ᵀ·dO − Wᵀ·dV'
    const float Gam = expf(Gl);
    for (int d = row0; d < dk; d += RS) {
      float s = 0.f;
      for (int i = 0; i < cr.len; ++i)
        s += Eg[i] * Qs[i * ldk + d] * dO[i * BV + lc] - Ws[i * ldk + d] * dV[i * BV + lc];
      dS[d * BV + lc] = Gam * dS[d * BV + lc] + s;
    }
  }
}

// ---- 2. products with the chunk-start state and its gradient ----------------------------------------------
constexpr int kTileV = 32;        // value columns streamed per step
constexpr int kColsK = 128;       // key columns per pass (one thread each)
constexpr int kRowsPer = C / (kThreads / kColsK);  // 32 rows per thread

__global__ void __launch_bounds__(kThreads) gdn_chunk_state_grad_kernel(
    KIn dout, const float* kn, const float* Gc, const int32_t* chunks, const float* states, const float* dh,
    const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW, float* gsum, int64_t HK, int64_t HV,
    int dk, int dv) {
  // Rows padded to 36 floats: 16-byte aligned for float4 reads, and 8 consecutive rows read as float4 hit
  // distinct banks (36·k mod 32 = 4k).
  constexpr int LT = kTileV + 4;
  extern __shared__ __align__(16) float sm[];
  float* dOt = sm;                  // [C][LT]
  float* Vpt = dOt + C * LT;        // [C][LT]
  float* dUt = Vpt + C * LT;        // [C][LT]
  float* St = dUt + C * LT;         // [kColsK][LT]
  float* dSt = St + kColsK * LT;    // [kColsK][LT]
  float* G = dSt + kColsK * LT;     // [C]
  float* red = G + C;               // [32]
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  const int dcol = tid % kColsK, rg = tid / kColsK;
  if (tid < C) G[tid] = tid < cr.len ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
  const float* Sn = states + (static_cast<int64_t>(ch) * HV + h) * dk * dv;
  const float* dSn = dh + (static_cast<int64_t>(ch) * HV + h) * dk * dv;
  float local = 0.f;  // this thread's share of Σ(S_n ⊙ dS^end)
  float kpart = 0.f;  // and of Σ(dK̂_state ⊙ K̂)
  for (int d0 = 0; d0 < dk; d0 += kColsK) {
    float aq[kRowsPer], ak[kRowsPer], aw[kRowsPer];
#pragma unroll
    for (int r = 0; r < kRowsPer; ++r) aq[r] = ak[r] = aw[r] = 0.f;
    for (int c0 = 0; c0 < dv; c0 += kTileV) {
      __syncthreads();
      for (int idx = tid; idx < C * kTileV; idx += kThreads) {
        const int i = idx / kTileV, c = idx % kTileV;
        const bool ok = i < cr.len && c0 + c < dv;
        const int64_t off = ((cr.t0 + i) * HV + h) * dv + c0 + c;
        dOt[i * LT + c] = ok ? ld(dout, off) : 0.f;
        Vpt[i * LT + c] = ok ? vnew[off] : 0.f;
        dUt[i * LT + c] = ok ? dvn[off] : 0.f;
      }
      for (int idx = tid; idx < kColsK * kTileV; idx += kThreads) {
        const int d = idx / kTileV, c = idx % kTileV;
        const bool ok = d0 + d < dk && c0 + c < dv;
        const float s = ok ? Sn[(d0 + d) * dv + c0 + c] : 0.f, ds = ok ? dSn[(d0 + d) * dv + c0 + c] : 0.f;
        St[d * LT + c] = s;
        dSt[d * LT + c] = ds;
        local += s * ds;
      }
      __syncthreads();
      for (int c = 0; c < kTileV; c += 4) {
        const float4 s = *reinterpret_cast<const float4*>(St + dcol * LT + c);
        const float4 ds = *reinterpret_cast<const float4*>(dSt + dcol * LT + c);
#pragma unroll
        for (int r = 0; r < kRowsPer; ++r) {
          const int i = rg + 2 * r;
          const float4 o = *reinterpret_cast<const float4*>(dOt + i * LT + c);
          const float4 p = *reinterpret_cast<const float4*>(Vpt + i * LT + c);
          const float4 u = *reinterpret_cast<const float4*>(dUt + i * LT + c);
          aq[r] += o.x * s.x + o.y * s.y + o.z * s.z + o.w * s.w;
          ak[r] += p.x * ds.x + p.y * ds.y + p.z * ds.z + p.w * ds.w;
          aw[r] += u.x * s.x + u.y * s.y + u.z * s.z + u.w * s.w;
        }
      }
    }
    const int d = d0 + dcol;
    if (d < dk) {
      const float Gl = G[cr.len - 1];
#pragma unroll
      for (int r = 0; r < kRowsPer; ++r) {
        const int i = rg + 2 * r;
        if (i >= cr.len) continue;
        const int64_t t = cr.t0 + i;
        const int64_t o = (t * HV + h) * dk + d;
        const float kst = expf(Gl - G[i]) * ak[r];
        dqh[o] = expf(G[i]) * aq[r];
        dkh[o] = kst;
        dW[o] = -aw[r];
        kpart += kst * kn[(t * HK + hk) * dk + d];
      }
    }
  }
  const float Gam = expf(G[cr.len - 1]);
  const float total = block_sum(Gam * local + kpart, red);
  if (tid == 0) gsum[static_cast<int64_t>(ch) * HV + h] = total;
}

// ---- 3. intra-chunk terms of dQ̂, dK̂ and dG ---------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) gdn_chunk_intra_grad_kernel(
    KIn dout, const float* qn, const float* kn, const float* Gc, const int32_t* chunks, const float* vnew,
    const float* gsum, float* dqh, float* dkh, float* dg, int64_t HK, int64_t HV, int dk, int dv) {
  extern __shared__ __align__(16) float sm[];
  const int ldk = dk + 1, ldv = dv + 1;
  float* Qs = sm;                 // [C][ldk]
  float* Ks = Qs + C * ldk;       // [C][ldk]
  float* dO = Ks + C * ldk;       // [C][ldv]
  float* Vp = dO + C * ldv;       // [C][ldv]
  float* D = Vp + C * ldv;        // [C][C+1]
  float* G = D + C * (C + 1);     // [C]
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  for (int idx = tid; idx < C * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    const bool ok = i < cr.len;
    Qs[i * ldk + d] = ok ? qn[((cr.t0 + i) * HK + hk) * dk + d] : 0.f;
    Ks[i * ldk + d] = ok ? kn[((cr.t0 + i) * HK + hk) * dk + d] : 0.f;
  }
  for (int idx = tid; idx < C * dv; idx += kThreads) {
    const int i = idx / dv, c = idx % dv;
    const bool ok = i < cr.len;
    const int64_t off = ((cr.t0 + i) * HV + h) * dv + c;
    dO[i * ldv + c] = ok ? ld(dout, off) : 0.f;
    Vp[i * ldv + c] = ok ? vnew[off] : 0.f;
  }
  if (tid < C) G[tid] = tid < cr.len ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
  __syncthreads();
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float s = 0.f;
    if (i >= j && i < cr.len) {
      for (int c = 0; c < dv; ++c) s += dO[i * ldv + c] * Vp[j * ldv + c];
      s *= expf(G[i] - G[j]);
    }
    D[i * (C + 1) + j] = s;
  }
  __syncthreads();
  for (int i = warp; i < cr.len; i += kWarps) {
    const int64_t t = cr.t0 + i;
    float dotq = 0.f, dotk = 0.f;
    for (int d = lane; d < dk; d += 32) {
      const int64_t o = (t * HV + h) * dk + d;
      float q = dqh[o], k = dkh[o];
      for (int j = 0; j <= i; ++j) q += D[i * (C + 1) + j] * Ks[j * ldk + d];
      for (int j = i; j < cr.len; ++j) k += D[j * (C + 1) + i] * Qs[j * ldk + d];
      dqh[o] = q;
      dkh[o] = k;
      dotq += q * Qs[i * ldk + d];
      dotk += k * Ks[i * ldk + d];
    }
    const float r = warp_sum(dotq) - warp_sum(dotk);
    if (lane == 0) dg[t * HV + h] = r + (i == cr.len - 1 ? gsum[static_cast<int64_t>(ch) * HV + h] : 0.f);
  }
}

// ---- 4. WY representation backward and dg -------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) gdn_chunk_wy_grad_kernel(
    const float* kn, KIn v, KIn beta, const float* Gc, const int32_t* chunks, const float* Tm, float* dW,
    const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta, int64_t HK, int64_t HV, int dk, int dv) {
  extern __shared__ __align__(16) float sm[];
  const int ldk = dk + 1, ldv = dv + 1, ldc = C + 1;
  float* Ks = sm;                 // [C][ldk]
  float* Xw = Ks + C * ldk;       // [C][ldk]: dW, then Tᵀ·dW in place
  float* Vs = Xw + C * ldk;       // [C][ldv]
  float* Xu = Vs + C * ldv;       // [C][ldv]: dU = dV', then Tᵀ·dU in place
  float* Ts = Xu + C * ldv;       // [C][ldc]
  float* X = Ts + C * ldc;        // [C][ldc]: dT, then dÂ = dA ⊙ e^{G_i−G_j}
  float* Y = X + C * ldc;         // [C][ldc]: dT·Tᵀ, then K̂K̂ᵀ
  float* G = Y + C * ldc;         // [C]
  float* B = G + C;               // [C]
  float* dGv = B + C;             // [C]
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  for (int idx = tid; idx < C * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    const bool ok = i < cr.len;
    Ks[i * ldk + d] = ok ? kn[((cr.t0 + i) * HK + hk) * dk + d] : 0.f;
    Xw[i * ldk + d] = ok ? dW[((cr.t0 + i) * HV + h) * dk + d] : 0.f;
  }
  for (int idx = tid; idx < C * dv; idx += kThreads) {
    const int i = idx / dv, c = idx % dv;
    const bool ok = i < cr.len;
    const int64_t off = ((cr.t0 + i) * HV + h) * dv + c;
    Vs[i * ldv + c] = ok ? ld(v, off) : 0.f;
    Xu[i * ldv + c] = ok ? dvn[off] : 0.f;
  }
  const float* Ti = Tm + (static_cast<int64_t>(ch) * HV + h) * C * C;
  for (int p = tid; p < C * C; p += kThreads) Ts[(p / C) * ldc + p % C] = Ti[p];
  if (tid < C) {
    const bool ok = tid < cr.len;
    G[tid] = ok ? Gc[(cr.t0 + tid) * HV + h] : 0.f;
    B[tid] = ok ? ld(beta, (cr.t0 + tid) * HV + h) : 0.f;
  }
  __syncthreads();
  // dT = dW·(diag(βγ)K̂)ᵀ + dU·(diag(β)V)ᵀ
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float a = 0.f, b = 0.f;
    for (int d = 0; d < dk; ++d) a += Xw[i * ldk + d] * Ks[j * ldk + d];
    for (int c = 0; c < dv; ++c) b += Xu[i * ldv + c] * Vs[j * ldv + c];
    X[i * ldc + j] = B[j] * (expf(G[j]) * a + b);
  }
  __syncthreads();
  // Y = dT·Tᵀ (T is lower triangular: T_jm = 0 for m > j)
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float s = 0.f;
    for (int m = 0; m <= j; ++m) s += X[i * ldc + m] * Ts[j * ldc + m];
    Y[i * ldc + j] = s;
  }
  __syncthreads();
  // dÂ_ij = −(Tᵀ·Y)_ij·e^{G_i−G_j} for i > j (strictly lower part only)
  for (int p = tid; p < C * C; p += kThreads) {
    const int i = p / C, j = p % C;
    float s = 0.f;
    if (i > j && i < cr.len) {
      for (int m = i; m < C; ++m) s += Ts[m * ldc + i] * Y[m * ldc + j];
      s = -s * expf(G[i] - G[j]);
    }
    X[i * ldc + j] = s;
  }
  __syncthreads();
  // Xw = Tᵀ·dW, Xu = Tᵀ·dU in place: row i reads rows j ≥ i only, so ascending rows never read a result.
  for (int col = tid; col < dk + dv; col += kThreads) {
    float* Mx = col < dk ? Xw : Xu;
    const int ld_ = col < dk ? ldk : ldv, cc = col < dk ? col : col - dk;
    for (int i = 0; i < C; ++i) {
      float s = 0.f;
      for (int j = i; j < C; ++j) s += Ts[j * ldc + i] * Mx[j * ld_ + cc];
      Mx[i * ld_ + cc] = s;
    }
  }
  for (int p = tid; p < C * C; p += kThreads) {  // K̂K̂ᵀ (Y is free again)
    const int i = p / C, j = p % C;
    float s = 0.f;
    for (int d = 0; d < dk; ++d) s += Ks[i * ldk + d] * Ks[j * ldk + d];
    Y[i * ldc + j] = s;
  }
  __syncthreads();
  for (int i = warp; i < cr.len; i += kWarps) {
    const int64_t t = cr.t0 + i;
    const float bi = B[i], gi = expf(G[i]), bg = bi * gi;
    float xwk = 0.f, xuv = 0.f, ra = 0.f, ca = 0.f;
    for (int d = lane; d < dk; d += 32) {
      const int64_t o = (t * HV + h) * dk + d;
      float s = 0.f, u = 0.f;
      for (int j = 0; j < i; ++j) s += X[i * ldc + j] * Ks[j * ldk + d];
      for (int j = i + 1; j < cr.len; ++j) u += X[j * ldc + i] * B[j] * Ks[j * ldk + d];
      dkh[o] += bg * Xw[i * ldk + d] + bi * s + u;
      xwk += Xw[i * ldk + d] * Ks[i * ldk + d];
    }
    for (int c = lane; c < dv; c += 32) {
      st(dv_out, (t * HV + h) * dv + c, bi * Xu[i * ldv + c]);
      xuv += Xu[i * ldv + c] * Vs[i * ldv + c];
    }
    for (int j = lane; j < cr.len; j += 32) {
      if (j < i) ra += X[i * ldc + j] * Y[i * ldc + j];
      if (j > i) ca += B[j] * X[j * ldc + i] * Y[j * ldc + i];
    }
    xwk = warp_sum(xwk);
    xuv = warp_sum(xuv);
    ra = warp_sum(ra);
    ca = warp_sum(ca);
    if (lane == 0) {
      dbeta[t * HV + h] = xuv + gi * xwk + ra;
      dGv[i] = dg[t * HV + h] + bg * xwk + bi * ra - ca;
    }
  }
  __syncthreads();
  if (tid == 0) gdn_chunk::store_reverse_cumsum(dGv, dg, cr, HV, h);  // dg_t = Σ_{m ≥ t in this chunk} dG_m
}

size_t dscan_smem(int dk) {
  return sizeof(float) * (size_t(dk) * kChunkBV + 3 * size_t(C) * (dk + 1) + 2 * size_t(C) * kChunkBV +
                          size_t(C) * (C + 1) + 2 * C);
}
size_t state_grad_smem() {
  return sizeof(float) * (3 * size_t(C) * (kTileV + 4) + 2 * size_t(kColsK) * (kTileV + 4) + C + 32);
}
size_t intra_smem(int dk, int dv) {
  return sizeof(float) * (2 * size_t(C) * (dk + 1) + 2 * size_t(C) * (dv + 1) + size_t(C) * (C + 1) + C);
}
size_t wy_smem(int dk, int dv) {
  return sizeof(float) * (2 * size_t(C) * (dk + 1) + 2 * size_t(C) * (dv + 1) + 3 * size_t(C) * (C + 1) + 3 * C);
}

}  // namespace

size_t gdn_chunk_bwd_smem(int dk, int dv) {
  size_t m = dscan_smem(dk);
  for (size_t s : {state_grad_smem(), intra_smem(dk, dv), wy_smem(dk, dv)}) m = s > m ? s : m;
  return m;
}

#ifndef DT_ATTN_EMU  // launcher: not part of the host emulation build (dev/emu/gdn)
cudaError_t launch_gdn_chunk_bwd(const KernelPolicy& pol, KIn dout, const float* qn, const float* kn, KIn v,
                                 KIn beta, const int32_t* chunks, int nchunks, const int32_t* chunk_off,
                                 int nseq, float* W, const float* M, const float* Gc, const float* Tm,
                                 const float* states, const float* vnew, float* dh, float* dvn, float* gsum,
                                 float* dqh, float* dkh, KOut dv_out, float* dg, float* dbeta, int64_t HK,
                                 int64_t HV, int dk, int dv, cudaStream_t s) {
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  const size_t s1 = dscan_smem(dk), s2 = state_grad_smem(), s3 = intra_smem(dk, dv), s4 = wy_smem(dk, dv);
  cudaError_t e = set_launch_smem(pol, gdn_chunk_dscan_kernel<kChunkBV>, s1);
  if (e == cudaSuccess) e = set_launch_smem(pol, gdn_chunk_dscan_kernel<kChunkBV / 2>, s1);
  if (e == cudaSuccess) e = set_launch_smem(pol, gdn_chunk_state_grad_kernel, s2);
  if (e == cudaSuccess) e = set_launch_smem(pol, gdn_chunk_intra_grad_kernel, s3);
  if (e == cudaSuccess) e = set_launch_smem(pol, gdn_chunk_wy_grad_kernel, s4);
  if (e != cudaSuccess) return e;
  const int bv = gdn_scan_tile_cols(nseq * HV, dv, pol.sm_count);
  const dim3 scan_grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>((dv + bv - 1) / bv));
  auto* dscan = bv == kChunkBV ? gdn_chunk_dscan_kernel<kChunkBV> : gdn_chunk_dscan_kernel<kChunkBV / 2>;
  dscan<<<scan_grid, kThreads, s1, s>>>(dout, qn, kn, W, M, Gc, chunks, chunk_off, dh, dvn, HK, HV, dk, dv);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV));
  // W is read by the reverse scan above and overwritten with dW below (same stream: ordered).
  gdn_chunk_state_grad_kernel<<<grid, kThreads, s2, s>>>(dout, kn, Gc, chunks, states, dh, vnew, dvn, dqh, dkh, W,
                                                         gsum, HK, HV, dk, dv);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  gdn_chunk_intra_grad_kernel<<<grid, kThreads, s3, s>>>(dout, qn, kn, Gc, chunks, vnew, gsum, dqh, dkh, dg, HK, HV,
                                                         dk, dv);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  gdn_chunk_wy_grad_kernel<<<grid, kThreads, s4, s>>>(kn, v, beta, Gc, chunks, Tm, W, dvn, dkh, dv_out, dg, dbeta, HK,
                                                      HV, dk, dv);
  return cudaGetLastError();
}

cudaError_t launch_gdn_chunk_bwd_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, KIn v,
                                     const GdnGates& gates, const int32_t* chunks, int nchunks,
                                     const int32_t* chunk_off, int nseq, const float* Gc, const GdnBwdBf16& b,
                                     float* gsum, void* dk_part16, KOut dv_out, const GdnGateGrads& gr,
                                     int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s) {
  // dk (=) needs T: the L2 backward's rows where the WY kernel does not form dk itself
  if (!gdn_chunk_mma_supported(dk, dv) || (b.dk.p && b.tokens <= 0)) return cudaErrorInvalidValue;
  if (nchunks == 0 || HV == 0) return cudaSuccess;
  // images with q, k or dO not in bf16 (a recompute's forward prep writes them for any inputs): mma.sync
  const bool wgmma_dscan = b.image && dout.t == KType::BF16 && gdn_qk_kind(qk) == 1;
  cudaError_t e = wgmma_dscan
                      ? launch_gdn_chunk_dscan_wgmma(pol, dout, qk, b.W16, b.M16, Gc, chunks, chunk_off, nseq,
                                                     b.dh16, b.dvn16, HK, HV, s, b.tokens)
                      : launch_gdn_chunk_dscan_mma(pol, dout, qk, b.W16, b.M16, Gc, chunks, chunk_off, nseq,
                                                   b.dh16, b.dvn16, HK, HV, dk, dv, s, b.image);
  if (e == cudaSuccess)
    e = launch_gdn_chunk_grad_mma(pol, dout, qk, Gc, chunks, nchunks, b.states16, b.dh16, b.vnew16, b.dvn16,
                                  b.dqh16, dk_part16, b.dW16, gsum, gr.dg, HK, HV, dk, dv, s, b.dq,
                                  b.states_odd16, b.tokens);
  if (e == cudaSuccess && gdn_wy_wgmma_selected(pol, qk, v, dk, dv)) {  // Hopper, unless no tensor maps
    e = launch_gdn_wy_grad_wgmma(pol, qk, v, gates, Gc, chunks, nchunks, b.T16, b.dW16, b.dvn16, dk_part16,
                                 b.dkh16, dv_out, gr, HK, HV, s, b.tokens, b.dk);
    if (e != cudaErrorNotSupported) return e;
    e = cudaSuccess;
  }
  if (e == cudaSuccess)
    e = launch_gdn_wy_grad_mma(pol, qk, v, gates, Gc, chunks, nchunks, b.T16, b.dW16, b.dvn16, dk_part16,
                               b.dkh16, dv_out, gr, HK, HV, dk, dv, s);
  if (e == cudaSuccess && b.dk.p)  // dk from the per-value-head dk̂ the mma.sync kernel wrote
    e = launch_l2norm_bwd_gva(KIn{b.dkh16, KType::BF16}, qk.k, qk.rk, 1.f, b.dk, b.tokens, HK, HV, dk, s);
  return e;
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
