// Warp-tile helpers of the tensor-core GDN chunk kernels (chunk_bwd_mma.cu): bf16 operand tiles in shared
// memory (rows padded by 8 elements so the 8 row addresses of an ldmatrix hit distinct banks), fp32 staging
// from global memory, and one warp product C[16 x 8·NB] (+)= op(A)·op(B) over a k range.
//
// Fragment loaders (see common/mma.cuh for the register layouts; lane = 0..31):
//   frag_a   A[m][k] stored row-major X[m][k]                    (ldmatrix)
//   frag_a_t A[m][k] = X[k][m], i.e. the transpose of a stored X  (ldmatrix.trans: matrix i = lane/8 covers
//            stored rows k0 + 8·(i/2) .. +7 and columns m0 + 8·(i%2) .. +7, so register i gets
//            (stored rows 2t, 2t+1 at column g) = A(g (+8), k 2t, 2t+1 (+8)) = a_i)
//   frag_b   B[k][n] = Y[n][k] (Y row-major, e.g. C = A·Yᵀ)       (ldmatrix)
//   frag_b_t B[k][n] = Y[k][n]                                   (ldmatrix.trans)
// frag_b / frag_b_t return two n-blocks: (r0, r1) for columns n0..n0+7, (r2, r3) for n0+8..n0+15.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/mma.cuh"

namespace deltatune::kernels::gdn_mma {

using bf16 = __nv_bfloat16;
using mma::smem_addr;

__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16* X, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31;
  mma::ldsm_x4(a, smem_addr(X + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8));
}
__device__ __forceinline__ void frag_a_t(uint32_t (&a)[4], const bf16* X, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31, i = l >> 3;
  mma::ldsm_x4_t(a, smem_addr(X + (k0 + (l & 7) + (i >> 1) * 8) * ld + m0 + (i & 1) * 8));
}
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const bf16* Y, int ld, int n0, int k0) {
  const int l = threadIdx.x & 31;
  mma::ldsm_x4(b, smem_addr(Y + (n0 + (l & 7) + ((l >> 4) << 3)) * ld + k0 + ((l >> 3) & 1) * 8));
}
__device__ __forceinline__ void frag_b_t(uint32_t (&b)[4], const bf16* Y, int ld, int n0, int k0) {
  const int l = threadIdx.x & 31;
  mma::ldsm_x4_t(b, smem_addr(Y + (k0 + (l & 15)) * ld + n0 + (l >> 4) * 8));
}

// The A fragment of X (AT: stored transposed) and the B fragments of Y (BT: stored [k][n]).
template <bool AT> __device__ __forceinline__ void frag_a_op(uint32_t (&a)[4], const bf16* X, int ld, int m0, int k0) {
  if (AT) frag_a_t(a, X, ld, m0, k0);
  else frag_a(a, X, ld, m0, k0);
}
template <bool BT> __device__ __forceinline__ void frag_b_op(uint32_t (&b)[4], const bf16* Y, int ld, int n0, int k0) {
  if (BT) frag_b_t(b, Y, ld, n0, k0);
  else frag_b(b, Y, ld, n0, k0);
}

// acc[nb] (+)= op(A)[m0..m0+15][k] · op(B)[k][n0 + 8·nb ..] for k in [k0, k1) (multiples of 16).
// AT: A stored transposed (X[k][m]); BT: B stored as Y[k][n] (else Y[n][k]).
template <int NB, bool AT, bool BT>
__device__ __forceinline__ void warp_mma(float (&acc)[NB][4], const bf16* A, int lda, int m0, const bf16* B, int ldb,
                                         int n0, int k0, int k1) {
  static_assert(NB % 2 == 0, "n-blocks come in pairs");
  for (int k = k0; k < k1; k += 16) {
    uint32_t a[4];
    frag_a_op<AT>(a, A, lda, m0, k);
#pragma unroll
    for (int p = 0; p < NB / 2; ++p) {
      uint32_t b[4];
      frag_b_op<BT>(b, B, ldb, n0 + 16 * p, k);
      mma::mma16816(acc[2 * p], a, b[0], b[1]);
      mma::mma16816(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
}

// ---- hi/lo splits for products whose results cancel downstream (dg) ----------------------------------------
// x = hi + lo + r with hi = bf16(x), lo = bf16(x − hi), |r| ≤ 2^-17·|x|: a bf16 pair carries ~16 significant
// bits. A·B with both split is hi·hi + hi·lo + lo·hi (the dropped lo·lo is ~2^-18 of it); with one side exact
// in bf16 (inputs stored as bf16) it is hi·B + lo·B.
__device__ __forceinline__ void split_bf16x2(uint32_t& hi, uint32_t& lo, float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 f = __bfloat1622float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = mma::pack_bf16(a - f.x, b - f.y);
}
__device__ __forceinline__ void st_split_bf16x2(bf16* hi, bf16* lo, float a, float b) {
  uint32_t h, l;
  split_bf16x2(h, l, a, b);
  *reinterpret_cast<uint32_t*>(hi) = h;
  *reinterpret_cast<uint32_t*>(lo) = l;
}
// warp_mma with split operands: SA: A = A + Alo (Alo a tile of the same layout and ld), SB: B = B + Blo.
// Per 16-wide k step: 1 mma (neither), 2 (one side) or 3 (both; lo·lo dropped) per 16x8 output block.
template <int NB, bool AT, bool BT, bool SA, bool SB>
__device__ __forceinline__ void warp_mma_split(float (&acc)[NB][4], const bf16* A, const bf16* Alo, int lda, int m0,
                                               const bf16* B, const bf16* Blo, int ldb, int n0, int k0, int k1) {
  static_assert(NB % 2 == 0, "n-blocks come in pairs");
  for (int k = k0; k < k1; k += 16) {
    uint32_t a[4], al[4];
    frag_a_op<AT>(a, A, lda, m0, k);
    if (SA) frag_a_op<AT>(al, Alo, lda, m0, k);
#pragma unroll
    for (int p = 0; p < NB / 2; ++p) {
      uint32_t b[4], bl[4];
      frag_b_op<BT>(b, B, ldb, n0 + 16 * p, k);
      if (SB) {
        frag_b_op<BT>(bl, Blo, ldb, n0 + 16 * p, k);
        mma::mma16816(acc[2 * p], a, bl[0], bl[1]);
        mma::mma16816(acc[2 * p + 1], a, bl[2], bl[3]);
      }
      if (SA) {
        mma::mma16816(acc[2 * p], al, b[0], b[1]);
        mma::mma16816(acc[2 * p + 1], al, b[2], b[3]);
      }
      mma::mma16816(acc[2 * p], a, b[0], b[1]);
      mma::mma16816(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
}

template <int NB> __device__ __forceinline__ void zero(float (&acc)[NB][4]) {
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
}

__device__ __forceinline__ void st_bf16x2(bf16* p, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(p) = mma::pack_bf16(lo, hi);
}

// Reads src[r·stride + c .. +3] (float4; zeros for rows_ok ≤ r < ROWS) for r < ROWS, c in [0, COLS) step 4
// and hands each to put(r, c, x). src rows are 16-byte aligned (COLS and stride multiples of 4). NT threads.
template <int ROWS, int COLS, int NT, class Put>
__device__ __forceinline__ void for_f32_rows(const float* src, int64_t stride, int rows_ok, Put&& put) {
  static_assert(COLS % 4 == 0, "float4 columns");
  constexpr int Q = COLS / 4;
  for (int idx = threadIdx.x; idx < ROWS * Q; idx += NT) {
    const int r = idx / Q, c = (idx % Q) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < rows_ok) x = *reinterpret_cast<const float4*>(src + r * stride + c);
    put(r, c, x);
  }
}

// dst[r][c] (bf16, row stride ld) = src[r·stride + c] for r < rows_ok, 0 for rows_ok ≤ r < ROWS.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void stage_f32(bf16* dst, int ld, const float* src, int64_t stride, int rows_ok) {
  for_f32_rows<ROWS, COLS, NT>(src, stride, rows_ok, [&](int r, int c, float4 x) {
    st_bf16x2(dst + r * ld + c, x.x, x.y);
    st_bf16x2(dst + r * ld + c + 2, x.z, x.w);
  });
}

// dst[r][0..COLS) (row stride LD elements) = src[r·stride ..] for r < rows_ok, zeros for rows_ok ≤ r < ROWS,
// as 16-byte cp.async copies by NT threads (the caller commits the group).
template <int ROWS, int COLS, int LD, int NT, class T>
__device__ __forceinline__ void cp_rows(T* dst, const T* src, int64_t stride, int rows_ok) {
  constexpr int E = 16 / sizeof(T), CPR = COLS / E;
  static_assert(COLS % E == 0 && ROWS * CPR % NT == 0, "16-byte pieces split evenly over the threads");
#pragma unroll
  for (int k = 0; k < ROWS * CPR / NT; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / CPR, c = (idx % CPR) * E;
    const bool ok = r < rows_ok;
    mma::cp_async16(mma::smem_addr(dst + r * LD + c), ok ? src + r * stride + c : src, ok);
  }
}

// For r < ROWS, c in [0, COLS) step 4 (NT threads): x = load(r, c) for r < rows_ok, else zeros, then put(r, c, x).
// All loads of a thread are issued before its first put (latency-bound callers: the scans, the fused backward).
template <int ROWS, int COLS, int NT, class Load, class Put>
__device__ __forceinline__ void for_rows_batched(int rows_ok, Load&& load, Put&& put) {
  constexpr int Q = COLS / 4, N = ROWS * Q / NT;
  static_assert(ROWS * Q % NT == 0, "4-element pieces split evenly over the threads");
  float4 x[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    x[k] = r < rows_ok ? load(r, c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    put(r, c, x[k]);
  }
}

// dst[r][0..COLS) (bf16, row stride LD) = scale_r · src[r·stride ..] for r < rows_ok, else 0 (scale null: 1),
// r < ROWS.
template <int ROWS, int COLS, int LD, int NT>
__device__ __forceinline__ void stage_rows(bf16* dst, const float* src, int64_t stride, int rows_ok,
                                           const float* scale) {
  for_rows_batched<ROWS, COLS, NT>(
      rows_ok, [&](int r, int c) { return *reinterpret_cast<const float4*>(src + r * stride + c); },
      [&](int r, int c, float4 x) {
        const float sc = scale ? scale[r] : 1.f;
        uint2 packed;
        packed.x = mma::pack_bf16(x.x * sc, x.y * sc);
        packed.y = mma::pack_bf16(x.z * sc, x.w * sc);
        *reinterpret_cast<uint2*>(dst + r * LD + c) = packed;
      });
}

// Only the lo tile of stage_f32_split (the hi tile staged earlier or not needed).
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void stage_f32_lo(bf16* lo, int ld, const float* src, int64_t stride, int rows_ok) {
  for_f32_rows<ROWS, COLS, NT>(src, stride, rows_ok, [&](int r, int c, float4 x) {
    uint32_t h, l0, l1;
    split_bf16x2(h, l0, x.x, x.y);
    split_bf16x2(h, l1, x.z, x.w);
    *reinterpret_cast<uint2*>(lo + r * ld + c) = make_uint2(l0, l1);
  });
}

// stage_f32 into a hi/lo pair of tiles (see split_bf16x2).
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void stage_f32_split(bf16* hi, bf16* lo, int ld, const float* src, int64_t stride,
                                                int rows_ok) {
  for_f32_rows<ROWS, COLS, NT>(src, stride, rows_ok, [&](int r, int c, float4 x) {
    st_split_bf16x2(hi + r * ld + c, lo + r * ld + c, x.x, x.y);
    st_split_bf16x2(hi + r * ld + c + 2, lo + r * ld + c + 2, x.z, x.w);
  });
}

// Rows m0 + g (+8) < rows_ok of a warp's 16 x 8·NB tile, times s, to dst[row·rs + n0 + ..] as bf16. Lanes
// t4, t4^1 swap one pair so that each stores 4 consecutive columns (8 bytes; 32 per row and instruction).
template <int NB>
__device__ __forceinline__ void store_tile_bf16(bf16* dst, int64_t rs, const float (&acc)[NB][4], int m0, int n0,
                                                int rows_ok, float s) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const bool odd = t4 & 1;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = m0 + g + 8 * hf;
#pragma unroll
    for (int p = 0; p < NB / 2; ++p) {
      const uint32_t v0 = mma::pack_bf16(s * acc[2 * p][2 * hf], s * acc[2 * p][2 * hf + 1]);
      const uint32_t v1 = mma::pack_bf16(s * acc[2 * p + 1][2 * hf], s * acc[2 * p + 1][2 * hf + 1]);
      const uint32_t r = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 1);
      if (i < rows_ok) {
        const int c = n0 + 16 * p + (odd ? 8 + 2 * (t4 - 1) : 2 * t4);
        *reinterpret_cast<uint2*>(dst + i * rs + c) = odd ? make_uint2(r, v1) : make_uint2(v0, r);
      }
    }
  }
}

}  // namespace deltatune::kernels::gdn_mma
