// The triangular solve T = (I + A)^{-1} of the chunked GDN forward prep (A strictly lower triangular, 64 x
// 64, fp32 in shared memory with row stride kLA), shared by the mma.sync prep (chunk_prep_mma.cu) and the
// wgmma one (fwd_prep_wgmma.cu): the four diagonal 16 x 16 blocks by forward substitution, then the
// off-diagonal blocks by their distance from the diagonal on tensor cores (every operand split into bf16 hi +
// lo).
#pragma once
#include <cstdint>

#include "common/mma.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels::gdn_prep {

using gdn_mma::split_bf16x2;
constexpr int kLA = 72;  // fp32 row stride of A and T: float2 fragment reads conflict-free
constexpr int LA = kLA;

// One warp, lanes < 16: T_bb = (I + A_bb)^{-1} for the diagonal block at rows and columns m0 .. m0 + 15; lane
// c solves column c, x_i = δ_ic − Σ_{j<i} A_ij·x_j. Rows past the chunk's end are identity rows (their A rows
// are zero; set explicitly: exact zeros, as the FMA kernel).
__device__ __forceinline__ void diagonal_t(const float* Af, float* Tf, int m0, int len) {
  const int c = threadIdx.x & 31;
  if (c >= 16) return;
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    float s = 0.f;
    const float* ar = Af + (m0 + i) * LA + m0;
#pragma unroll
    for (int j = 0; j < i; ++j) s += ar[j] * x[j];
    x[i] = i == c ? 1.f : (i < c || m0 + i >= len ? 0.f : -s);
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) Tf[(m0 + i) * LA + m0 + c] = x[i];
}

// Fragments (hi, lo) of the A operand Xᵀ of a 16x16 fp32 block X at Xb (row stride LA): element (i, j) of the
// operand is X[j][i] (gathered by columns).
__device__ __forceinline__ void frag_a_tr_f32(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* Xb) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int i = g + 8 * (q & 1), j = 2 * t + 8 * (q >> 1);
    split_bf16x2(hi[q], lo[q], Xb[j * LA + i], Xb[(j + 1) * LA + i]);
  }
}
// Fragments (hi, lo) of the B operand Yᵀ (16x16, columns nb·8..+7) of a 16x16 fp32 block Y at Yb: element
// (k, n) of the operand is Y[n][k] (row pairs of Y: float2 reads).
__device__ __forceinline__ void frag_b_tr_f32(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* Yb, int nb) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const float2 y = *reinterpret_cast<const float2*>(Yb + (8 * nb + g) * LA + 2 * t + 8 * q);
    split_bf16x2(hi[q], lo[q], y.x, y.y);
  }
}
// acc += X·B for split operands (3 mma per 16x8 block).
__device__ __forceinline__ void mma_split3(float (&acc)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                           const uint32_t (&bh)[2], const uint32_t (&bl)[2]) {
  mma::mma16816(acc, ah, bh[0], bh[1]);
  mma::mma16816(acc, ah, bl[0], bl[1]);
  mma::mma16816(acc, al, bh[0], bh[1]);
}

// Pᵀ += Σ_{m0 ≤ m < m1} T_mkᵀ·A_rmᵀ for block (r, k) (off_diagonal_t's first product).
__device__ __forceinline__ void off_diagonal_part(const float* Af, const float* Tf, int k, int r, int m0, int m1,
                                                  float (&p)[2][4]) {
  for (int m = m0; m < m1; ++m) {
    uint32_t ah[4], al[4];
    frag_a_tr_f32(ah, al, Tf + 16 * m * LA + 16 * k);  // T_mkᵀ
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      uint32_t bh[2], bl[2];
      frag_b_tr_f32(bh, bl, Af + 16 * r * LA + 16 * m, nb);  // A_rmᵀ
      mma_split3(p[nb], ah, al, bh, bl);
    }
  }
}

// T_rk = −T_rr·P from Pᵀ (off_diagonal_t's second product and store).
__device__ __forceinline__ void off_diagonal_finish(float* Tf, int k, int r, int len, const float (&p)[2][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Pᵀ's accumulators as an A operand: (g, 2t..), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..).
  uint32_t ah[4], al[4];
  split_bf16x2(ah[0], al[0], p[0][0], p[0][1]);
  split_bf16x2(ah[1], al[1], p[0][2], p[0][3]);
  split_bf16x2(ah[2], al[2], p[1][0], p[1][1]);
  split_bf16x2(ah[3], al[3], p[1][2], p[1][3]);
  float x[2][4] = {};
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
    uint32_t bh[2], bl[2];
    frag_b_tr_f32(bh, bl, Tf + 16 * r * LA + 16 * r, nb);  // T_rrᵀ
    mma_split3(x[nb], ah, al, bh, bl);
  }
  // x = T_rkᵀ: x[nb][e + 2h] is element (g + 8h, 8nb + 2t + e) of the transpose, T_rk[8nb + 2t + e][g + 8h].
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 8 * nb + 2 * t + (e & 1), c = g + 8 * (e >> 1);
      Tf[(16 * r + i) * LA + 16 * k + c] = 16 * r + i < len ? -x[nb][e] : 0.f;
    }
}

// One warp: block (r, k) of T (r > k; the diagonal blocks and every block of smaller distance r − k in Tf, A
// in Af): T_rk = −T_rr·Σ_{k≤m<r} A_rm·T_mk, formed transposed (see step 3). Rows past the chunk's end are
// zero.
__device__ __forceinline__ void off_diagonal_t(const float* Af, float* Tf, int k, int r, int len) {
  float p[2][4] = {};
  off_diagonal_part(Af, Tf, k, r, k, r, p);
  off_diagonal_finish(Tf, k, r, len, p);
}

}  // namespace deltatune::kernels::gdn_prep
