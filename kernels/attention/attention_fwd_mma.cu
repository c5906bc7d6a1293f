// Varlen GQA attention forward on tensor cores (flash-attention-2 layout), same contract as
// attention_fwd_fma.cu:  s_ij = scale·q_i·k_j (j ≤ i when causal, else every j; same sequence),
// o_i (=) softmax(s_i)·V, lse_i (=) log Σ_j exp(s_ij).
// One block of 4 warps per (head, 64-query tile); warp w owns query rows 16w..16w+15. The block walks the
// 64-key tiles of its sequence up to the diagonal (causal) or to its end (full attention, the vision tower): S = Q·Kᵀ (bf16 mma, fp32 accumulators), online softmax
// in fp32 registers (base-2 exponentials of pre-scaled scores), P packed to bf16 straight from the S
// accumulators into A fragments, O += P·V. Shared memory: Q, K, V tiles (64 x hd bf16, rows padded by 16
// bytes so the 8 rows an ldmatrix reads fall in different banks). V of tile j loads while S_j is computed,
// K of tile j+1 while P·V_j is.
#include <cmath>

#include "attention/attention.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/device.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
constexpr int BQ = kAttnMmaTile;  // query rows per block
constexpr int BK = 64;            // keys per tile
constexpr int NW = BQ / 16;       // warps
constexpr int NT = NW * 32;
static_assert(BK % 16 == 0 && BQ % BK == 0, "diagonal tiles assume BQ a multiple of BK");

template <int HD> constexpr int row_ld() { return HD + 8; }
template <int HD> constexpr size_t fwd_smem() { return sizeof(bf16) * size_t(BQ + 2 * BK) * row_ld<HD>(); }

template <int HD, bool CAUSAL>
__global__ void __launch_bounds__(NT, 2) attention_fwd_mma_kernel(
    const bf16* __restrict__ q,  // (T, nH, HD)
    const bf16* __restrict__ k,  // (T, nKV, HD)
    const bf16* __restrict__ v,  // (T, nKV, HD)
    const int32_t* __restrict__ cu, const int32_t* __restrict__ tiles, int nH, int nKV, float scale,
    KOut o,                      // (T, nH, HD)
    float* __restrict__ lse) {   // (T, nH)
  constexpr int LD = row_ld<HD>();
  constexpr int NS = BK / 8;  // 8-key column blocks of S
  constexpr int ND = HD / 8;  // 8-wide column blocks of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);  // (BQ, LD)
  bf16* Ks = Qs + BQ * LD;                        // (BK, LD)
  bf16* Vs = Ks + BK * LD;                        // (BK, LD)

  const int h = blockIdx.x;
  const int seq = tiles[2 * blockIdx.y], q0 = tiles[2 * blockIdx.y + 1];
  const int s0 = cu[seq], s1 = cu[seq + 1];
  const int kvh = h / (nH / nKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;

  mma::load_rows<BQ, HD, LD, NT>(Qs, q, q0, s1, nH, h);
  mma::load_rows<BK, HD, LD, NT>(Ks, k, s0, s1, nKV, kvh);
  mma::cp_async_commit();

  float acc[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of the raw scores of rows g and g+8
  float l[2] = {0.f, 0.f};              // this thread's partial row sums (its 2 of every 8 columns)
  const float sl2 = scale * 1.4426950408889634f;  // exp(scale·x) = exp2(sl2·x)

  const uint32_t q_addr = mma::smem_addr(Qs + (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
  const uint32_t k_addr = mma::smem_addr(Ks + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8);
  const uint32_t v_addr = mma::smem_addr(Vs + (lane & 15) * LD + (lane >> 4) * 8);
  const int row0 = q0 + warp * 16 + g;  // token of c0/c1; c2/c3 are row0 + 8

  // Key tiles up to the diagonal (q0 - s0 is a multiple of BQ), or all of the sequence's.
  const int nk = CAUSAL ? (q0 - s0) / BK + BQ / BK : (s1 - s0 + BK - 1) / BK;
  for (int j = 0; j < nk; ++j) {
    const int k0 = s0 + j * BK;
    mma::cp_async_wait<0>();
    __syncthreads();  // K_j landed for all threads; every warp is done with V_{j-1}
    mma::load_rows<BK, HD, LD, NT>(Vs, v, k0, s1, nKV, kvh);
    mma::cp_async_commit();

    float s[NS][4];
#pragma unroll
    for (int i = 0; i < NS; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[4];
      mma::ldsm_x4(a, q_addr + kk * 32);
#pragma unroll
      for (int nb = 0; nb < NS / 2; ++nb) {
        uint32_t b[4];
        mma::ldsm_x4(b, k_addr + (nb * 16 * LD + kk * 16) * 2);
        mma::mma16816(s[2 * nb], a, b[0], b[1]);
        mma::mma16816(s[2 * nb + 1], a, b[2], b[3]);
      }
    }
    // Causal and end-of-sequence mask, only where a key can exceed the tile's first query (causal) or the
    // sequence end (full).
    if (CAUSAL ? k0 + BK - 1 > q0 : k0 + BK > s1) {
#pragma unroll
      for (int nb = 0; nb < NS; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = k0 + nb * 8 + 2 * tq + (e & 1), row = row0 + (e >> 1) * 8;
          if ((CAUSAL && col > row) || col >= s1) s[nb][e] = -INFINITY;
        }
    }
    // Online softmax per row half r (r = 0: c0/c1, row g; r = 1: c2/c3, row g+8).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int nb = 0; nb < NS; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Every row sees key s0 in tile 0, so mx is finite; the guard keeps -inf - -inf out regardless.
      const float mu = mx == -INFINITY ? 0.f : mx;
      const float corr = exp2f((m[r] - mu) * sl2);  // m = -inf -> 0
      const float off = mu * sl2;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < NS; ++nb) {
        const float p0 = exp2f(fmaf(s[nb][2 * r], sl2, -off)), p1 = exp2f(fmaf(s[nb][2 * r + 1], sl2, -off));
        s[nb][2 * r] = p0;
        s[nb][2 * r + 1] = p1;
        sum += p0 + p1;
      }
      l[r] = l[r] * corr + sum;
      m[r] = mx;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        acc[nd][2 * r] *= corr;
        acc[nd][2 * r + 1] *= corr;
      }
    }

    mma::cp_async_wait<0>();
    __syncthreads();  // V_j landed; every warp is done with K_j
    if (j + 1 < nk) mma::load_rows<BK, HD, LD, NT>(Ks, k, k0 + BK, s1, nKV, kvh);
    mma::cp_async_commit();

#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      uint32_t a[4];
      mma::c_to_a(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int db = 0; db < ND / 2; ++db) {
        uint32_t b[4];
        mma::ldsm_x4_t(b, v_addr + (kc * 16 * LD + db * 16) * 2);
        mma::mma16816(acc[2 * db], a, b[0], b[1]);
        mma::mma16816(acc[2 * db + 1], a, b[2], b[3]);
      }
    }
  }
  mma::cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t row = row0 + r * 8;
    if (row < s1) {
      const float inv = 1.f / sum;  // sum >= 1: the row maximum contributes exp2(0)
      const int64_t base = (row * nH + h) * HD + 2 * tq;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        st(o, base + nd * 8, acc[nd][2 * r] * inv);
        st(o, base + nd * 8 + 1, acc[nd][2 * r + 1] * inv);
      }
      if (tq == 0) lse[row * nH + h] = m[r] * scale + logf(sum);
    }
  }
}

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/attention/attention_emu.cpp)
template <int HD, bool CAUSAL>
cudaError_t run_fwd(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu, const int32_t* tiles, int ntiles, int64_t nH,
                    int64_t nKV, float scale, KOut o, float* lse, cudaStream_t s) {
  const size_t smem = fwd_smem<HD>();
  cudaError_t e = set_launch_smem(pol, attention_fwd_mma_kernel<HD, CAUSAL>, smem);
  if (e != cudaSuccess) return e;
  // Heads vary fastest so the first-launched blocks are the host's most expensive tiles, in all heads.
  const dim3 grid(static_cast<unsigned>(nH), static_cast<unsigned>(ntiles));
  attention_fwd_mma_kernel<HD, CAUSAL><<<grid, NT, smem, s>>>(
      static_cast<const bf16*>(q.p), static_cast<const bf16*>(k.p), static_cast<const bf16*>(v.p), cu, tiles,
      static_cast<int>(nH), static_cast<int>(nKV), scale, o, lse);
  return cudaGetLastError();
}

#endif  // DT_ATTN_EMU
}  // namespace

bool attention_mma_supported(int hd) { return hd == 64 || hd == 96 || hd == 128 || hd == 256; }

int attention_mma_padded_hd(int hd) {
  for (int p : {64, 96, 128, 256})
    if (hd <= p) return p;
  return 0;
}

size_t attention_fwd_mma_smem(const KernelPolicy& pol, int hd) {  // one tile per head dim (≤ 99 KiB)
#ifndef DT_ATTN_EMU
  if (pol.hopper() && hd == 256) return attention_fwd_wgmma_smem(hd);  // the Hopper kernel (larger) where it applies
#endif
  return hd <= 64 ? fwd_smem<64>() : hd <= 96 ? fwd_smem<96>() : hd <= 128 ? fwd_smem<128>() : fwd_smem<256>();
}

#ifndef DT_ATTN_EMU
cudaError_t launch_attention_fwd_mma(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens, const int32_t* tiles,
                                     int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
                                     KOut o, float* lse, cudaStream_t s) {
  if (ntiles == 0 || nH == 0) return cudaSuccess;
  if (q.t != KType::BF16 || k.t != KType::BF16 || v.t != KType::BF16 || !attention_mma_supported(hd))
    return cudaErrorInvalidValue;
  if (pol.hopper() && attention_fwd_wgmma_supported(hd, nH, nKV))
    return launch_attention_fwd_wgmma(pol, q, k, v, cu_seqlens, tiles, ntiles, T, nH, nKV, hd, scale, causal, o, lse,
                                      s);
  auto run = [&]<int HD>() {
    return causal ? run_fwd<HD, true>(pol, q, k, v, cu_seqlens, tiles, ntiles, nH, nKV, scale, o, lse, s)
                  : run_fwd<HD, false>(pol, q, k, v, cu_seqlens, tiles, ntiles, nH, nKV, scale, o, lse, s);
  };
  switch (hd) {
    case 64: return run.template operator()<64>();
    case 96: return run.template operator()<96>();
    case 128: return run.template operator()<128>();
    default: return run.template operator()<256>();
  }
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
