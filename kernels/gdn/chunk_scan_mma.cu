// Tensor-core version (bf16 mma.sync, fp32 accumulators and fp32 state) of the chunked GDN forward scan
// (gdn_chunk_scan_kernel in chunk_fwd.cu), same contract: one block per (sequence, value head, tile of BV
// value columns), chunks of the sequence in order. Per chunk, with S the state at the chunk's start:
//   phase A (warp w: rows 16w..16w+15):  V' = U − W·S,  QS = Q̂·S             (k = dk over bf16 S)
//   phase B (warp w: rows 16w..16w+15):  O = diag(γ)·QS + M·V'                (causal k range only)
//           (warp w: state rows 32w..32w+31):  S ← Γ·S + (diag(Γ/γ)K̂)ᵀ·V'     (k = the chunk's 64 rows)
// S lives in registers in the mma accumulator layout (the update is an accumulation into it) and is copied
// to a bf16 tile for phase A's products; V' goes through a bf16 tile to be phase B's operand. Three block
// barriers per chunk. The inputs (F32 scratch of the prep kernel) are rounded to bf16 while staged.
// Resources (BV 32): 128 threads, smem 77 KiB (2 blocks per SM), registers: see ptxas -v.
// Estimate at T=8192 (2 sequences), HV 32: 256 blocks, 64 chunks each; per chunk 112 KiB of (mostly L2)
// loads and ~100 mma per warp -> ~4 us, so ~0.3 ms for the scan (FMA kernel: 6.1 ms).
#include "common/device.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int NT = 128;  // 4 warps
constexpr int DKM = 128, DVM = 128;
constexpr int LDK = DKM + 8;  // bf16 row stride of the 64 x dk tiles
constexpr int LDM = C + 8;

template <int BV> constexpr size_t scan_mma_smem() {
  return sizeof(bf16) * (3 * size_t(C) * LDK + size_t(C) * LDM + size_t(DKM) * (BV + 8) + size_t(C) * (BV + 8)) +
         sizeof(float) * 2 * C;
}

// dst[r][0..128) (bf16) = scale_r · src[r·stride ..] for r < rows_ok, else 0. All 16 float4 loads of a
// thread are issued before the first store: the scan is latency-bound (one chunk after another), and with
// one block per SM nothing else hides a load's round trip.
__device__ __forceinline__ void stage_rows128(bf16* dst, const float* src, int64_t stride, int rows_ok,
                                              const float* scale) {
  constexpr int Q = DKM / 4, N = C * Q / NT;
  float4 x[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    x[k] = r < rows_ok ? *reinterpret_cast<const float4*>(src + r * stride + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    const float sc = scale ? scale[r] : 1.f;
    uint2 packed;
    packed.x = mma::pack_bf16(x[k].x * sc, x[k].y * sc);
    packed.y = mma::pack_bf16(x[k].z * sc, x[k].w * sc);
    *reinterpret_cast<uint2*>(dst + r * LDK + c) = packed;
  }
}

template <int BV>
__global__ void __launch_bounds__(NT, 2) gdn_chunk_scan_mma_kernel(
    const float* qn, const float* kn, const float* W, const float* U, const float* M, const float* Gc,
    const int32_t* chunks, const int32_t* chunk_off, KOut o, float* states, float* vnew, int64_t HK, int64_t HV) {
  constexpr int NB = BV / 8, LDV = BV + 8;
  static_assert(NB % 2 == 0, "n-blocks come in pairs");
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Wb = reinterpret_cast<bf16*>(gdn_smem);  // [C][LDK]  W
  bf16* Qb = Wb + C * LDK;                        // [C][LDK]  Q̂
  bf16* Kb = Qb + C * LDK;                        // [C][LDK]  diag(Γ/γ)·K̂
  bf16* Mb = Kb + C * LDK;                        // [C][LDM]  M
  bf16* Sb = Mb + C * LDM;                        // [DK][LDV] S (bf16 copy)
  bf16* Vb = Sb + DKM * LDV;                      // [C][LDV]  V'
  float* G = reinterpret_cast<float*>(Vb + C * LDV);  // [C] G_i
  float* Dc = G + C;                                  // [C] Γ/γ_i
  const int n = blockIdx.x / HV, h = blockIdx.x % HV;
  const int c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;

  float S[2][NB][4];  // state rows 32·warp + 16·mt + (gr, gr + 8), columns 8·nb + 2·tq (+1)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) zero(S[mt]);
  for (int idx = threadIdx.x; idx < DKM * LDV; idx += NT) Sb[idx] = __float2bfloat16_rn(0.f);

  for (int ch = chunk_off[n]; ch < chunk_off[n + 1]; ++ch) {
    const int64_t t0 = chunks[2 * ch];
    const int len = chunks[2 * ch + 1];
    if (states) {  // chunk-start state for the backward pass: (chunk, HV, dk, dv)
      float* so = states + (static_cast<int64_t>(ch) * HV + h) * DKM * DVM + c0;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int r = 32 * warp + 16 * mt + gr, c = 8 * nb + 2 * tq;
          *reinterpret_cast<float2*>(so + r * DVM + c) = make_float2(S[mt][nb][0], S[mt][nb][1]);
          *reinterpret_cast<float2*>(so + (r + 8) * DVM + c) = make_float2(S[mt][nb][2], S[mt][nb][3]);
        }
    }
    __syncthreads();  // the previous chunk's readers of every tile are done; Sb holds this chunk's S
    if (threadIdx.x < C) {
      const int i = threadIdx.x;
      const float gl = Gc[(t0 + len - 1) * HV + h];
      const float gi = i < len ? Gc[(t0 + i) * HV + h] : 0.f;
      G[i] = gi;
      Dc[i] = i < len ? expf(gl - gi) : 0.f;
    }
    __syncthreads();
    stage_rows128(Wb, W + (t0 * HV + h) * DKM, HV * DKM, len, nullptr);
    stage_rows128(Qb, qn + (t0 * HK + hk) * DKM, HK * DKM, len, nullptr);
    stage_rows128(Kb, kn + (t0 * HK + hk) * DKM, HK * DKM, len, Dc);
    {
      const float* Mi = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
      constexpr int Q = C / 4, N = C * Q / NT;
      float4 x[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int idx = threadIdx.x + k * NT;
        x[k] = *reinterpret_cast<const float4*>(Mi + (idx / Q) * C + (idx % Q) * 4);
      }
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
        uint2 packed;
        packed.x = mma::pack_bf16(x[k].x, x[k].y);
        packed.y = mma::pack_bf16(x[k].z, x[k].w);
        *reinterpret_cast<uint2*>(Mb + r * LDM + c) = packed;
      }
    }
    __syncthreads();

    // Phase A: V' = U − W·S and QS = Q̂·S for rows 16·warp .. +15.
    const int m0 = 16 * warp;
    float vp[NB][4], qs[NB][4];
    zero(vp);
    zero(qs);
    warp_mma<NB, false, true>(vp, Wb, LDK, m0, Sb, LDV, 0, 0, DKM);
    warp_mma<NB, false, true>(qs, Qb, LDK, m0, Sb, LDV, 0, 0, DKM);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = m0 + gr + 8 * hf, c = 8 * nb + 2 * tq;
        float2 v = make_float2(0.f, 0.f);
        if (i < len) {
          const int64_t at = ((t0 + i) * HV + h) * DVM + c0 + c;
          const float2 u = *reinterpret_cast<const float2*>(U + at);
          v = make_float2(u.x - vp[nb][2 * hf], u.y - vp[nb][2 * hf + 1]);
          if (vnew) *reinterpret_cast<float2*>(vnew + at) = v;
        }
        vp[nb][2 * hf] = v.x, vp[nb][2 * hf + 1] = v.y;
        st_bf16x2(Vb + i * LDV + c, v.x, v.y);
      }
    __syncthreads();

    // Phase B: O = diag(γ)·QS + M·V' (M is causal: k only up to this warp's last row).
    if (o.p) {
      float mv[NB][4];
      zero(mv);
      warp_mma<NB, false, true>(mv, Mb, LDM, m0, Vb, LDV, 0, 0, m0 + 16);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = m0 + gr + 8 * hf, c = 8 * nb + 2 * tq;
          if (i >= len) continue;
          const float gam = expf(G[i]);
          const int64_t at = ((t0 + i) * HV + h) * DVM + c0 + c;
          st(o, at, gam * qs[nb][2 * hf] + mv[nb][2 * hf]);
          st(o, at + 1, gam * qs[nb][2 * hf + 1] + mv[nb][2 * hf + 1]);
        }
    }
    // S ← Γ·S + (diag(Γ/γ)K̂)ᵀ·V' for state rows 32·warp .. +31, then its bf16 copy for the next chunk.
    const float gam_l = expf(G[len - 1]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[mt][nb][e] *= gam_l;
      warp_mma<NB, true, true>(S[mt], Kb, LDK, 32 * warp + 16 * mt, Vb, LDV, 0, 0, C);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int r = 32 * warp + 16 * mt + gr, c = 8 * nb + 2 * tq;
        st_bf16x2(Sb + r * LDV + c, S[mt][nb][0], S[mt][nb][1]);
        st_bf16x2(Sb + (r + 8) * LDV + c, S[mt][nb][2], S[mt][nb][3]);
      }
    }
  }
}

}  // namespace

size_t gdn_chunk_scan_mma_smem(int dk, int dv, int bv) {
  if (!gdn_chunk_mma_supported(dk, dv)) return 0;
  return bv == kChunkBV ? scan_mma_smem<kChunkBV>() : scan_mma_smem<kChunkBV / 2>();
}

#ifndef DT_ATTN_EMU
cudaError_t launch_gdn_chunk_scan_mma(const float* qn, const float* kn, const float* W, const float* U,
                                      const float* M, const float* Gc, const int32_t* chunks,
                                      const int32_t* chunk_off, int nseq, KOut o, float* states, float* vnew,
                                      int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  const int bv = gdn_scan_tile_cols(nseq * HV, dv);
  auto* kernel = bv == kChunkBV ? gdn_chunk_scan_mma_kernel<kChunkBV> : gdn_chunk_scan_mma_kernel<kChunkBV / 2>;
  const size_t smem = gdn_chunk_scan_mma_smem(dk, dv, bv);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>(dv / bv));
  kernel<<<grid, NT, smem, s>>>(qn, kn, W, U, M, Gc, chunks, chunk_off, o, states, vnew, HK, HV);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
