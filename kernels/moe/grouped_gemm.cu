// Grouped expert GEMMs on tensor cores, row ranges read on the device (no host sync on expert counts).
//
// Both forms run one tile kernel: C_tile[BM, BN] = Σ_k A(m, k)·B(n, k) with bf16 operands staged in shared
// memory and fp32 accumulation in mma.sync.m16n8k16 (row.col).
//   forward   (grouped_gemm):       A(m, k) = x[r0 + m, k]; B(n, k) = W_e[n, k] (trans_w) or W_e[k, n];
//             C = y rows [r0, r0 + BM) ∩ expert e's rows. Blocks are mapped to (expert, row tile) through
//             tile_off[E+1] (exclusive scan of ceil(count_e / BM), built on the device by tile_prefix_kernel):
//             the grid is sized by the bound ceil(M/BM) + E and blocks past tile_off[E] exit. Under the Hopper
//             policy the bf16 vector case runs grouped_gemm_wgmma.cu instead (same tile map, 128 x 256 tiles).
//   wgrad     (grouped_gemm_wgrad): C = G_e [N, K]; A(m, k) = a[off_e + k, m]; B(n, k) = b[off_e + k, n]:
//             the reduction runs over expert e's rows (blockIdx.z = e); experts without rows give beta·G_e.
//
// Operand tiles reach shared memory one of two ways. When both operands allow 16-byte vectors (unit stride
// along the vector dimension, 16-byte aligned rows, extents multiples of 8: a_vec and b_vec, the case of every
// expert GEMM of a real model) a kStages-deep ring of cp.async copies keeps kStages - 1 k-steps in flight behind
// the MMAs (grouped_mma_pipe_kernel): the expert GEMMs read each expert's weights once for ~T·k/E rows, so they
// are bound by memory latency and bandwidth, and one k-step of register prefetch left the 35B-A3B shape's expert
// GEMMs at ~110 TFLOP/s (H200, ncu). Otherwise tiles are loaded global -> registers (8 bf16 per vector: 16-byte
// loads when the run of 8 is contiguous, in bounds and aligned; scalar otherwise, zero outside the matrix) one
// k-step ahead of the MMAs on the tile in shared memory (register double buffering, grouped_mma_kernel). An operand whose reduction dimension is
// contiguous in memory is stored k-major ([rows][k]) and read with ldmatrix; one whose row dimension is
// contiguous (W_e [K, N] for the dX products, both operands of the weight gradient) is stored as it lies
// ([k][rows]) and read with ldmatrix.trans, so global loads stay coalesced and shared stores 16 bytes wide.
//
// Fragment layout relied on (PTX ISA, mma.m16n8k16 with .bf16 A/B and .f32 C/D; g = lane / 4, q = lane % 4;
// each .b32 register holds two bf16, the lower column/k index in the low 16 bits):
//   A (16×16, row-major): a0 = A[g][2q..2q+1], a1 = A[g+8][2q..2q+1], a2 = A[g][2q+8..2q+9], a3 = A[g+8][2q+8..2q+9]
//   B (16×8, "col" = stored as B[n][k]): b0 = B[k=2q..2q+1][n=g], b1 = B[k=2q+8..2q+9][n=g]
//   C/D (16×8, f32): c0, c1 = C[g][2q], C[g][2q+1]; c2, c3 = C[g+8][2q], C[g+8][2q+1]
// and ldmatrix(.trans) as documented in common/mma.cuh (the address patterns are at frag_a / frag_b2).
// Shared rows are padded by 8 bf16 (k-major rows of 80 bytes, i-major rows of 272 or 80 bytes): the eight
// 16-byte row reads of each ldmatrix phase then fall in distinct banks.
// The MMA and ldmatrix go through common/mma.cuh, so dev/emu/moe/grouped_gemm_emu.cpp can run this
// kernel on the host against the PTX-defined fragment layouts (DT_ATTN_EMU build).
#include <cuda_bf16.h>

#include "common/mma.cuh"
#include "common/bf16x8.cuh"
#include "common/device.cuh"
#ifndef DT_ATTN_EMU
#include "common/launch_smem.cuh"
#endif
#include "moe/expert_row_tile.cuh"
#include "moe/moe.cuh"
#ifndef DT_ATTN_EMU
#include "moe/scan.cuh"
#endif

namespace deltatune::kernels {
namespace {

constexpr int kBK = 32;
constexpr int kPad = 8;
constexpr int kLd = kBK + kPad;  // shared row length in bf16
// bf16 of one operand tile of ROWS rows in shared memory: k-major [ROWS][kLd] or i-major [kBK][ROWS + 8].
__host__ __device__ constexpr int operand_elems(int rows) { return rows * kLd > kBK * (rows + 8) ? rows * kLd : kBK * (rows + 8); }

struct TileArgs {
  const void* a;  // bf16 (tensor-core kernel) or f32 (fp32 kernel): element (m, k) at a[m·a_sm + k·a_sk]
  const void* b;  // element (n, k) at b[e·b_se + n·b_sn + k·b_sk]
  int64_t a_sm, a_sk, b_sn, b_sk, b_se;  // b_se: expert stride of B (forward form)
  bool a_vec, b_vec;       // 16-byte loads allowed along the unit-stride dimension
  bool c_vec;              // C is bf16 with 16-byte aligned rows (ldc a multiple of 8): 8-element loads/stores
  KOut c;
  int64_t ldc, c_se;
  const int32_t* offsets;  // [E+1]
  const int32_t* tile_off; // [E+1] forward form only
  int E;
  int64_t M, N, K;         // C is M×N (forward: M unused, rows come from offsets); K: reduction (forward)
  float alpha, beta;
};

// This block's tile: operand origins (element offsets), valid extents, reduction length. False: no tile
// (forward blocks past the device-side tile count).
struct TileLoc {
  int64_t a_off, b_off, c_off, klen;
  int mlim, nlim;
};
template <int BM, int BN, bool WGRAD>
__device__ __forceinline__ bool locate_tile(const TileArgs& g, TileLoc& t) {
  if constexpr (!WGRAD) {
    ExpertRowTile rt;
    if (!expert_row_tile(g.tile_off, g.offsets, g.E, BM, rt)) return false;
    const int e = rt.e;
    const int64_t r0 = rt.r0;
    const int64_t n0 = int64_t(rt.ntile) * BN;
    t.mlim = static_cast<int>(min(int64_t(BM), int64_t(g.offsets[e + 1]) - r0));
    t.nlim = static_cast<int>(min(int64_t(BN), g.N - n0));
    t.a_off = r0 * g.a_sm;
    t.b_off = int64_t(e) * g.b_se + n0 * g.b_sn;
    t.c_off = r0 * g.ldc + n0;
    t.klen = g.K;
  } else {
    const int e = blockIdx.z;
    const int64_t r0 = g.offsets[e];
    const int64_t m0 = int64_t(blockIdx.x) * BM, n0 = int64_t(blockIdx.y) * BN;
    t.mlim = static_cast<int>(min(int64_t(BM), g.M - m0));
    t.nlim = static_cast<int>(min(int64_t(BN), g.N - n0));
    t.a_off = m0 * g.a_sm + r0 * g.a_sk;
    t.b_off = n0 * g.b_sn + r0 * g.b_sk;
    t.c_off = int64_t(e) * g.c_se + m0 * g.ldc + n0;
    t.klen = int64_t(g.offsets[e + 1]) - r0;
  }
  return true;
}

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}

// Eight bf16 starting at p with element stride `stride`, of which the first `count` (0..8) exist.
__device__ __forceinline__ uint4 load8(const __nv_bfloat16* p, int64_t stride, int count, bool vec) {
  if (vec && count == 8 && stride == 1) return *reinterpret_cast<const uint4*>(p);
  __nv_bfloat16 v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = i < count ? p[i * stride] : __float2bfloat16_rn(0.f);
  return make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

// A ROWS×kBK operand tile: element (i, k) at p[i·si + (k0 + k)·sk], rows i < ilim, reduction k0 + k < klim.
// Two shared layouts, chosen by which global dimension is contiguous:
//   k-major (sk == 1, or neither stride is 1): S[i][k], rows of kLd; vector v = 8 consecutive k of row i.
//   i-major (si == 1):                         S[k][i], rows of ROWS + 8; vector v = 8 consecutive i of row k.
// Either way consecutive threads take consecutive 16-byte runs of global memory (coalesced) and store them
// as one 16-byte shared store each (the +8 padding keeps rows 16-byte aligned and ldmatrix conflict-free).
template <int ROWS, int NT>
struct TileLoader {
  static constexpr int kVecs = ROWS * kBK / 8;
  static constexpr int kPer = (kVecs + NT - 1) / NT;
  static constexpr int kLdI = ROWS + 8;  // i-major shared row length in bf16
  uint4 r[kPer];

  __device__ __forceinline__ void load(const __nv_bfloat16* p, int64_t si, int64_t sk, bool vec, bool kmajor,
                                       int ilim, int64_t k0, int64_t klim) {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int v = threadIdx.x + q * NT;
      if (kVecs % NT != 0 && v >= kVecs) break;
      if (kmajor) {
        const int i = v / (kBK / 8), k = (v % (kBK / 8)) * 8;
        const int64_t left = klim - (k0 + k);
        const int count = i < ilim ? int(left < 0 ? 0 : (left > 8 ? 8 : left)) : 0;
        r[q] = load8(p + i * si + (k0 + k) * sk, sk, count, vec);
      } else {
        const int i = (v % (ROWS / 8)) * 8, k = v / (ROWS / 8);
        const int left = ilim - i;
        const int count = k0 + k < klim ? (left < 0 ? 0 : (left > 8 ? 8 : left)) : 0;
        r[q] = load8(p + i * si + (k0 + k) * sk, si, count, vec);
      }
    }
  }

  __device__ __forceinline__ void store(__nv_bfloat16* s, bool kmajor) const {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int v = threadIdx.x + q * NT;
      if (kVecs % NT != 0 && v >= kVecs) break;
      if (kmajor) {
        const int i = v / (kBK / 8), k = (v % (kBK / 8)) * 8;
        *reinterpret_cast<uint4*>(s + i * kLd + k) = r[q];
      } else {
        const int i = (v % (ROWS / 8)) * 8, k = v / (ROWS / 8);
        *reinterpret_cast<uint4*>(s + k * kLdI + i) = r[q];
      }
    }
  }
};

// Fragments of one k16 step through ldmatrix (address patterns of common/mma.cuh):
//   A (16 rows from m0):  k-major S[m][k]: lane -> &S[m0 + (lane & 15)][kk + (lane >> 4)·8], no .trans;
//                         i-major S[k][m]: lane -> &S[kk + (lane & 7) + (lane >> 4)·8][m0 + ((lane >> 3) & 1)·8],
//                         .trans (matrix i holds rows k 0-7 / 8-15 × cols m 0-7 / 8-15, giving a0..a3).
//   B (two n-blocks n0, n0 + 8): k-major S[n][k]: lane -> &S[n0 + (lane & 7) + (lane >> 4)·8][kk + ((lane >> 3) & 1)·8];
//                         i-major S[k][n]: lane -> &S[kk + (lane & 15)][n0 + (lane >> 4)·8], .trans;
//                         registers (0, 1) = (b0, b1) of n0, (2, 3) = (b0, b1) of n0 + 8.
template <int ROWS>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const __nv_bfloat16* s, bool kmajor, int m0, int kk) {
  const int lane = threadIdx.x & 31;
  if (kmajor) mma::ldsm_x4(a, mma::smem_addr(s + (m0 + (lane & 15)) * kLd + kk + (lane >> 4) * 8));
  else
    mma::ldsm_x4_t(a, mma::smem_addr(s + (kk + (lane & 7) + ((lane >> 4) << 3)) * (ROWS + 8) + m0 +
                                     ((lane >> 3) & 1) * 8));
}
template <int ROWS>
__device__ __forceinline__ void frag_b2(uint32_t (&b)[4], const __nv_bfloat16* s, bool kmajor, int n0, int kk) {
  const int lane = threadIdx.x & 31;
  if (kmajor)
    mma::ldsm_x4(b, mma::smem_addr(s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk + ((lane >> 3) & 1) * 8));
  else mma::ldsm_x4_t(b, mma::smem_addr(s + (kk + (lane & 15)) * (ROWS + 8) + n0 + (lane >> 4) * 8));
}

// One kBK step of MMAs of the warp (wm, wn) on the operand tiles in shared memory.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void tile_mma_step(float (&acc)[BM / WM / 16][BN / WN / 8][4], const __nv_bfloat16* As,
                                              const __nv_bfloat16* Bs, bool a_kmajor, bool b_kmajor, int wm, int wn) {
  constexpr int TM = BM / WM, TN = BN / WN;
  constexpr int FM = TM / 16, FN = TN / 8;
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    uint32_t af[FM][4], bfr[FN / 2][4];
#pragma unroll
    for (int i = 0; i < FM; ++i) frag_a<BM>(af[i], As, a_kmajor, wm * TM + i * 16, kk);
#pragma unroll
    for (int j = 0; j < FN / 2; ++j) frag_b2<BN>(bfr[j], Bs, b_kmajor, wn * TN + j * 16, kk);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j) mma::mma16816(acc[i][j], af[i], bfr[j / 2][(j & 1) * 2], bfr[j / 2][(j & 1) * 2 + 1]);
  }
}

// Calls f(i, j, c, r, n) for each of this thread's accumulator elements acc[i][j][c] with its row r and column n
// in the tile (the mma.m16n8 accumulator layout of warp (wm, wn)).
template <int BM, int BN, int WM, int WN, class F>
__device__ __forceinline__ void for_each_acc(int wm, int wn, F&& f) {
  constexpr int TM = BM / WM, TN = BN / WN;
  constexpr int FM = TM / 16, FN = TN / 8;
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) f(i, j, c, wm * TM + i * 16 + gq + (c >= 2 ? 8 : 0), wn * TN + j * 8 + tq * 2 + (c & 1));
}

// C (=) alpha·acc + beta·C inside the tile's valid extents.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void tile_epilogue(const float (&acc)[BM / WM / 16][BN / WN / 8][4], const TileArgs& g,
                                              const TileLoc& t, int wm, int wn) {
  for_each_acc<BM, BN, WM, WN>(wm, wn, [&](int i, int j, int c, int r, int n) {
    if (r < t.mlim && n < t.nlim) {
      const int64_t o = t.c_off + int64_t(r) * g.ldc + n;
      float v = g.alpha * acc[i][j][c];
      if (g.beta != 0.f) v += g.beta * ld(g.c, o);
      st(g.c, o, v);
    }
  });
}

// C's old values under this thread's accumulators (beta != 0), read before the main loop so that their latency
// overlaps the operand copies: a rank-fitted weight-gradient block runs only ~4 k-steps, and reading G after them
// left it waiting on a second round trip with nothing in flight. tile_epilogue then forms the same
// alpha·acc + beta·C expression with these values (same bits).
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void tile_c_load(float (&old)[BM / WM / 16][BN / WN / 8][4], const TileArgs& g,
                                            const TileLoc& t, int wm, int wn) {
  for_each_acc<BM, BN, WM, WN>(wm, wn, [&](int i, int j, int c, int r, int n) {
    old[i][j][c] = g.beta != 0.f && r < t.mlim && n < t.nlim ? ld(g.c, t.c_off + int64_t(r) * g.ldc + n) : 0.f;
  });
}

// tile_epilogue with C's old values from tile_c_load.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void tile_epilogue_old(const float (&acc)[BM / WM / 16][BN / WN / 8][4],
                                                  const float (&old)[BM / WM / 16][BN / WN / 8][4], const TileArgs& g,
                                                  const TileLoc& t, int wm, int wn) {
  for_each_acc<BM, BN, WM, WN>(wm, wn, [&](int i, int j, int c, int r, int n) {
    if (r < t.mlim && n < t.nlim) {
      float v = g.alpha * acc[i][j][c];
      if (g.beta != 0.f) v += g.beta * old[i][j][c];
      st(g.c, t.c_off + int64_t(r) * g.ldc + n, v);
    }
  });
}

// What both tensor-core kernels start from: this block's tile, its operand origins, the operands' shared layouts
// (k-major unless the row dimension is the contiguous one) and this warp's place in the tile. False: no tile.
struct TileStart {
  TileLoc t;
  const __nv_bfloat16 *pa, *pb;
  bool a_kmajor, b_kmajor;
  int wm, wn;
};
template <int BM, int BN, int WN, bool WGRAD>
__device__ __forceinline__ bool tile_start(const TileArgs& g, TileStart& s) {
  if (!locate_tile<BM, BN, WGRAD>(g, s.t)) return false;
  s.pa = static_cast<const __nv_bfloat16*>(g.a) + s.t.a_off;
  s.pb = static_cast<const __nv_bfloat16*>(g.b) + s.t.b_off;
  s.a_kmajor = g.a_sk == 1 || g.a_sm != 1;
  s.b_kmajor = g.b_sk == 1 || g.b_sn != 1;
  const int warp = threadIdx.x >> 5;
  s.wm = warp / WN;
  s.wn = warp % WN;
  return true;
}

template <int BM, int BN, int WM, int WN, bool WGRAD>
__global__ void __launch_bounds__(WM * WN * 32, 2) grouped_mma_kernel(TileArgs g) {
  constexpr int NT = WM * WN * 32;
  static_assert((BM / WM) % 16 == 0 && (BN / WN) % 16 == 0 && BM % 8 == 0 && BN % 8 == 0, "tile shape");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [BM][kLd] or [kBK][BM + 8]
  __nv_bfloat16* Bs = As + operand_elems(BM);                        // [BN][kLd] or [kBK][BN + 8]

  TileStart st;
  if (!tile_start<BM, BN, WN, WGRAD>(g, st)) return;
  const TileLoc& t = st.t;
  const __nv_bfloat16 *pa = st.pa, *pb = st.pb;
  const int64_t klen = t.klen;
  const bool a_kmajor = st.a_kmajor, b_kmajor = st.b_kmajor;
  const int wm = st.wm, wn = st.wn;

  float acc[BM / WM / 16][BN / WN / 8][4] = {};
  TileLoader<BM, NT> la;
  TileLoader<BN, NT> lb;
  const int64_t nk = (klen + kBK - 1) / kBK;
  if (nk > 0) {
    la.load(pa, g.a_sm, g.a_sk, g.a_vec, a_kmajor, t.mlim, 0, klen);
    lb.load(pb, g.b_sn, g.b_sk, g.b_vec, b_kmajor, t.nlim, 0, klen);
  }
  for (int64_t kt = 0; kt < nk; ++kt) {
    __syncthreads();  // the MMAs of the previous step are done with As/Bs
    la.store(As, a_kmajor);
    lb.store(Bs, b_kmajor);
    __syncthreads();
    if (kt + 1 < nk) {  // next tile's global loads overlap this step's MMAs
      la.load(pa, g.a_sm, g.a_sk, g.a_vec, a_kmajor, t.mlim, (kt + 1) * kBK, klen);
      lb.load(pb, g.b_sn, g.b_sk, g.b_vec, b_kmajor, t.nlim, (kt + 1) * kBK, klen);
    }
    tile_mma_step<BM, BN, WM, WN>(acc, As, Bs, a_kmajor, b_kmajor, wm, wn);
  }
  tile_epilogue<BM, BN, WM, WN>(acc, g, t, wm, wn);
}

// Ring depth of the cp.async form: 3 k-steps (96 of the reduction) in flight behind the MMAs. Big tiles take
// 4 x 20 KiB of shared memory (two blocks per SM on sm_80/sm_90, one on a 99 KiB GPU).
constexpr int kStages = 4;

// The ROWS×kBK operand tile at reduction offset k0 into shared memory by 16-byte cp.async copies, in
// TileLoader's layouts (k-major S[i][k] when the reduction dimension is contiguous, else i-major S[k][i]), zeros
// outside the matrix. Only for vector operands: unit stride along the 8-element runs and extents (ilim, klim
// along a k-major run) multiples of 8, so every run is wholly inside or wholly outside.
template <int ROWS, int NT>
__device__ __forceinline__ void tile_async(__nv_bfloat16* s, const __nv_bfloat16* p, int64_t si, int64_t sk,
                                           bool kmajor, int ilim, int64_t k0, int64_t klim) {
  constexpr int kVecs = ROWS * kBK / 8, kPer = (kVecs + NT - 1) / NT, kLdI = ROWS + 8;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int v = threadIdx.x + q * NT;
    if (kVecs % NT != 0 && v >= kVecs) break;
    const int i = kmajor ? v / (kBK / 8) : (v % (ROWS / 8)) * 8;
    const int k = kmajor ? (v % (kBK / 8)) * 8 : v / (ROWS / 8);
    const bool valid = i < ilim && k0 + k < klim;
    const __nv_bfloat16* src = valid ? p + i * si + (k0 + k) * sk : p;
    mma::cp_async16(mma::smem_addr(kmajor ? s + i * kLd + k : s + k * kLdI + i), src, valid);
  }
}

// Bf16 per ring slot of the cp.async kernel (A then B): room for either layout of each operand, or (RANK: the
// rank-fitted weight-gradient tiles, both operands row-contiguous, launched only where both are i-major) just the
// i-major tiles — 40 instead of 47 KiB a block at 16 x 128, five blocks an SM instead of four.
template <int BM, int BN, bool RANK>
__host__ __device__ constexpr int ring_slot_elems() {
  return RANK ? kBK * (BM + 8) + kBK * (BN + 8) : operand_elems(BM) + operand_elems(BN);
}

// RANK (rank-fitted weight-gradient tiles, see kRkM): the i-major slots above, five blocks an SM, and C's old values
// read before the main loop (tile_c_load).
template <int BM, int BN, int WM, int WN, bool WGRAD, bool RANK = false>
__global__ void __launch_bounds__(WM * WN * 32, RANK ? 5 : 2) grouped_mma_pipe_kernel(TileArgs g) {
  constexpr int NT = WM * WN * 32;
  constexpr int kStage = ring_slot_elems<BM, BN, RANK>();
  constexpr int kBOff = RANK ? kBK * (BM + 8) : operand_elems(BM);  // B's place in a slot
  static_assert((BM / WM) % 16 == 0 && (BN / WN) % 16 == 0 && BM % 8 == 0 && BN % 8 == 0, "tile shape");
  static_assert(!RANK || WGRAD, "the i-major ring is the weight gradient's");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw);

  TileStart st;
  if (!tile_start<BM, BN, WN, WGRAD>(g, st)) return;
  const TileLoc& t = st.t;
  const __nv_bfloat16 *pa = st.pa, *pb = st.pb;
  const int64_t klen = t.klen;
  const bool a_kmajor = RANK ? false : st.a_kmajor, b_kmajor = RANK ? false : st.b_kmajor;
  const int wm = st.wm, wn = st.wn;
  auto issue = [&](int64_t kt) {
    __nv_bfloat16* slot = ring + (kt % kStages) * kStage;
    tile_async<BM, NT>(slot, pa, g.a_sm, g.a_sk, a_kmajor, t.mlim, kt * kBK, klen);
    tile_async<BN, NT>(slot + kBOff, pb, g.b_sn, g.b_sk, b_kmajor, t.nlim, kt * kBK, klen);
  };

  float acc[BM / WM / 16][BN / WN / 8][4] = {};
  const int64_t nk = (klen + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) issue(s);
    mma::cp_async_commit();  // one group per step, empty past the end, so wait_group counts steps
  }
  float old[BM / WM / 16][BN / WN / 8][4];
  if constexpr (RANK) tile_c_load<BM, BN, WM, WN>(old, g, t, wm, wn);
  for (int64_t kt = 0; kt < nk; ++kt) {
    mma::cp_async_wait<kStages - 2>();  // step kt's copies (this thread's) have landed
    __syncthreads();                     // everyone's have, and everyone is done with step kt - 1's slot
    if (kt + kStages - 1 < nk) issue(kt + kStages - 1);
    mma::cp_async_commit();
    const __nv_bfloat16* slot = ring + (kt % kStages) * kStage;
    tile_mma_step<BM, BN, WM, WN>(acc, slot, slot + kBOff, a_kmajor, b_kmajor, wm, wn);
  }
  mma::cp_async_wait<0>();
  if constexpr (RANK) tile_epilogue_old<BM, BN, WM, WN>(acc, old, g, t, wm, wn);
  else tile_epilogue<BM, BN, WM, WN>(acc, g, t, wm, wn);
}

// fp32 form of the same tile problem (operands both F32: the LoRA products u·B_eᵀ and du·A_e, and every
// product in an F32-compute backend), FMA on 64×64×16 shared tiles, 16×16 threads each owning a 4×4
// strided block of C (rows ty + 16i, columns tx + 16j: conflict-free shared reads). Tiles are stored
// [k][rows] whatever the operand's orientation; each thread loads 4 elements along the operand's contiguous
// dimension so global reads stay coalesced.
constexpr int kFM = 64, kFN = 64, kFK = 16;

template <int ROWS>
__device__ __forceinline__ void f32_tile(float* s, const float* p, int64_t si, int64_t sk, int ilim, int64_t k0,
                                         int64_t klim) {
  const bool kmajor = sk == 1 || si != 1;
#pragma unroll
  for (int q = 0; q < ROWS * kFK / 256; ++q) {
    const int v = threadIdx.x + q * 256;
    const int i = kmajor ? v / kFK : v % ROWS, k = kmajor ? v % kFK : v / ROWS;
    s[k * (ROWS + 1) + i] = (i < ilim && k0 + k < klim) ? p[i * si + (k0 + k) * sk] : 0.f;
  }
}

template <bool WGRAD>
__global__ void __launch_bounds__(256) grouped_fma_kernel(TileArgs g) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* As = reinterpret_cast<float*>(smem_raw);  // [kFK][kFM + 1]
  float* Bs = As + kFK * (kFM + 1);                 // [kFK][kFN + 1]
  TileLoc t;
  if (!locate_tile<kFM, kFN, WGRAD>(g, t)) return;
  const float* pa = static_cast<const float*>(g.a) + t.a_off;
  const float* pb = static_cast<const float*>(g.b) + t.b_off;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < t.klen; k0 += kFK) {
    __syncthreads();
    f32_tile<kFM>(As, pa, g.a_sm, g.a_sk, t.mlim, k0, t.klen);
    f32_tile<kFN>(Bs, pb, g.b_sn, g.b_sk, t.nlim, k0, t.klen);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kFK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k * (kFM + 1) + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k * (kFN + 1) + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = ty + 16 * i, n = tx + 16 * j;
      if (r < t.mlim && n < t.nlim) {
        const int64_t o = t.c_off + int64_t(r) * g.ldc + n;
        float v = g.alpha * acc[i][j];
        if (g.beta != 0.f) v += g.beta * ld(g.c, o);
        st(g.c, o, v);
      }
    }
}
constexpr size_t fma_smem() { return sizeof(float) * kFK * (kFM + 1 + kFN + 1); }

// The fp32 forward form with a short reduction (K <= kThinK: the LoRA products y += s·u·B_eᵀ and dx += du·A_e,
// K = the rank) reads and writes all of C for ~2·K flops an element, so it is bound by C's traffic: each thread
// owns 8 consecutive columns of 8 rows (a warp one row's 256 columns: 16-byte loads and stores of a bf16 C), and
// the whole reduction sits in shared memory. The k order and the fmaf chain are grouped_fma_kernel's, so both
// give the same bits.
constexpr int kThinM = kFM, kThinN = 256, kThinK = 32;
constexpr size_t thin_smem() { return sizeof(float) * (kThinM * (kThinK + 1) + kThinK * kThinN); }

__global__ void __launch_bounds__(256) grouped_fma_thin_kernel(TileArgs g) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* Bs = reinterpret_cast<float*>(smem_raw);  // [kThinK][kThinN]: B(n, k) at Bs[k·kThinN + n]
  float* As = Bs + kThinK * kThinN;                 // [kThinM][kThinK + 1]: A(m, k)
  TileLoc t;
  if (!locate_tile<kThinM, kThinN, false>(g, t)) return;
  const float* pa = static_cast<const float*>(g.a) + t.a_off;
  const float* pb = static_cast<const float*>(g.b) + t.b_off;
  const int K = static_cast<int>(t.klen);
  // Operands: every load of a thread issued before any of its shared stores (unrolled to kThinK, predicated on
  // K), so each thread waits for global memory once. Thread n takes column n of B; threads 4i..4i+3 row i of A.
  {
    const int n = threadIdx.x, i = threadIdx.x / 4, kq = (threadIdx.x % 4) * (kThinK / 4);
    float b[kThinK], a[kThinK / 4];
#pragma unroll
    for (int k = 0; k < kThinK; ++k) b[k] = k < K && n < t.nlim ? pb[n * g.b_sn + k * g.b_sk] : 0.f;
#pragma unroll
    for (int k = 0; k < kThinK / 4; ++k) a[k] = kq + k < K && i < t.mlim ? pa[i * g.a_sm + (kq + k) * g.a_sk] : 0.f;
#pragma unroll
    for (int k = 0; k < kThinK; ++k) Bs[k * kThinN + n] = b[k];
#pragma unroll
    for (int k = 0; k < kThinK / 4; ++k) As[i * (kThinK + 1) + kq + k] = a[k];
  }
  __syncthreads();
  const int n0 = (threadIdx.x % 32) * 8, r0 = threadIdx.x / 32;
  // C's old rows, loaded before the products so that their latency overlaps them.
  uint4 old[8];
  const bool vec = g.c_vec && n0 + 8 <= t.nlim && g.beta != 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (vec && r0 + 8 * i < t.mlim) old[i] = *reinterpret_cast<const uint4*>(
        static_cast<const __nv_bfloat16*>(g.c.p) + t.c_off + int64_t(r0 + 8 * i) * g.ldc + n0);
  float acc[8][8] = {};
  for (int k = 0; k < K; ++k) {
    float a[8], b[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = As[(r0 + 8 * i) * (kThinK + 1) + k];
    const float4 b0 = *reinterpret_cast<const float4*>(Bs + k * kThinN + n0);
    const float4 b1 = *reinterpret_cast<const float4*>(Bs + k * kThinN + n0 + 4);
    b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w, b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = r0 + 8 * i;
    if (r >= t.mlim || n0 >= t.nlim) continue;
    const int64_t o = t.c_off + int64_t(r) * g.ldc + n0;
    if (g.c_vec && n0 + 8 <= t.nlim) {
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(&old[i]);
      Bf16x8 out;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float v = g.alpha * acc[i][j];
        if (vec) v += g.beta * (j % 2 ? __high2float(h[j / 2]) : __low2float(h[j / 2]));
        out.v[j] = v;
      }
      st8(g.c.p, o / 8, out);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (n0 + j >= t.nlim) break;
        float v = g.alpha * acc[i][j];
        if (g.beta != 0.f) v += g.beta * ld(g.c, o + j);
        st(g.c, o + j, v);
      }
    }
  }
}

// Big tiles for the expert weights (N, K in the hundreds or thousands); skinny N for LoRA ranks (N <= 32).
constexpr int kBigM = 128, kBigN = 128, kBigWM = 2, kBigWN = 4;
constexpr int kSkM = 128, kSkN = 32, kSkWM = 4, kSkWN = 2;
// Rank-fitted tiles of the LoRA weight gradients at r <= 16 (one m16 / two n8 MMA blocks across the rank, four
// warps along the long dimension): gA = duᵀ·x is [r, in] (kRkM x kRkLong tiles), gB = dyᵀ·u is [out, r]
// (kRkLong x kRkM). The 128 x 128 / 128 x 32 tiles gave them 16 valid rows (columns) of 128 (32): 8x (2x) the
// MMAs, and gA's 80 KiB ring (46 KiB now) half the blocks per SM, for the same operand traffic. Each G element is still
// one block's fp32 sum over the expert's rows in kBK steps in order (same k16 MMAs), so the bits do not change.
constexpr int kRkM = 16, kRkLong = 128, kRkWarps = 4;
constexpr size_t tile_smem(int bm, int bn) { return sizeof(__nv_bfloat16) * size_t(operand_elems(bm) + operand_elems(bn)); }
constexpr size_t pipe_smem(int bm, int bn) { return tile_smem(bm, bn) * kStages; }
template <int BM, int BN>
constexpr size_t rank_pipe_smem() { return sizeof(__nv_bfloat16) * size_t(ring_slot_elems<BM, BN, true>()) * kStages; }

#ifndef DT_ATTN_EMU  // the tile map and launchers are not part of the host emulation build
// tile_off (=) exclusive scan of ceil((off[e+1] - off[e]) / bm) over experts; one block, any E.
__global__ void tile_prefix_kernel(const int32_t* off, int E, int bm, int32_t* tile_off) {
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int e0 = min(E, int(threadIdx.x) * per), e1 = min(E, e0 + per);
  int mine = 0;
  for (int e = e0; e < e1; ++e) mine += (off[e + 1] - off[e] + bm - 1) / bm;
  int total = 0;
  int base = block_exclusive_scan(mine, &total);
  for (int e = e0; e < e1; ++e) {
    tile_off[e] = base;
    base += (off[e + 1] - off[e] + bm - 1) / bm;
  }
  if (threadIdx.x == 0) tile_off[E] = total;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }


// Vector operands take the cp.async ring where the policy's shared memory allows it; anything else the
// register-prefetch kernel.
template <int BM, int BN, int WM, int WN, bool WGRAD>
cudaError_t launch_tile(const KernelPolicy& pol, const TileArgs& a, dim3 grid, cudaStream_t s) {
  if (a.a_vec && a.b_vec) {
    auto* pipe = grouped_mma_pipe_kernel<BM, BN, WM, WN, WGRAD>;
    if (pol.smem_fits(pipe_smem(BM, BN)) && set_launch_smem(pol, pipe, pipe_smem(BM, BN)) == cudaSuccess) {
      pipe<<<grid, WM * WN * 32, pipe_smem(BM, BN), s>>>(a);
      return cudaGetLastError();
    }
    (void)cudaGetLastError();
  }
  if (!default_smem_fits(pol, tile_smem(BM, BN))) return cudaErrorInvalidConfiguration;
  grouped_mma_kernel<BM, BN, WM, WN, WGRAD><<<grid, WM * WN * 32, tile_smem(BM, BN), s>>>(a);
  return cudaGetLastError();
}
// The rank-fitted weight-gradient ring (grouped_mma_pipe_kernel<..., RANK>); cudaErrorInvalidConfiguration (nothing
// launched) where the policy's shared memory does not take it.
template <int BM, int BN, int WM, int WN>
cudaError_t launch_rank(const KernelPolicy& pol, const TileArgs& a, dim3 grid, cudaStream_t s) {
  auto* pipe = grouped_mma_pipe_kernel<BM, BN, WM, WN, true, true>;
  constexpr size_t bytes = rank_pipe_smem<BM, BN>();
  if (!pol.smem_fits(bytes) || set_launch_smem(pol, pipe, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorInvalidConfiguration;
  }
  // The whole carveout as shared memory (a hint): five 40 KiB blocks an SM need 205 KiB of it.
  (void)cudaFuncSetAttribute(pipe, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared));
  (void)cudaGetLastError();
  pipe<<<grid, WM * WN * 32, bytes, s>>>(a);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace

#ifndef DT_ATTN_EMU

cudaError_t launch_grouped_gemm(const KernelPolicy& pol, const void* x, const void* w, bool fp32, bool trans_w, const int32_t* offsets, int E,
                                int64_t M, int64_t N, int64_t K, KOut y, float alpha, float beta, int32_t* tile_scratch,
                                cudaStream_t s, const GroupedLora* lora) {
  if (E < 1) return cudaErrorInvalidValue;
  if (lora && (fp32 || !grouped_gemm_lora_fusable(pol, x, w, trans_w, N, K, *lora))) return cudaErrorInvalidConfiguration;
  if (M == 0 || N == 0) return cudaGetLastError();
  TileArgs a{};
  a.a = x;
  a.a_sm = K;
  a.a_sk = 1;
  a.b = w;
  a.b_se = N * K;
  a.b_sn = trans_w ? K : 1;
  a.b_sk = trans_w ? 1 : N;
  a.a_vec = aligned16(x) && K % 8 == 0;
  a.b_vec = aligned16(w) && (trans_w ? K % 8 == 0 : N % 8 == 0);
  a.c = y;
  a.ldc = N;
  a.offsets = offsets;
  a.tile_off = tile_scratch;
  a.E = E;
  a.M = M;
  a.N = N;
  a.K = K;
  a.alpha = alpha;
  a.beta = beta;
  a.c_vec = y.t == KType::BF16 && aligned16(y.p) && N % 8 == 0;
  const bool skinny = N <= kSkN, thin = fp32 && K <= kThinK;
  const int bm = fp32 ? kFM : skinny ? kSkM : kBigM, bn = thin ? kThinN : fp32 ? kFN : skinny ? kSkN : kBigN;
  if (!default_smem_fits(pol, thin ? thin_smem() : fp32 ? fma_smem() : tile_smem(bm, bn)))
    return cudaErrorInvalidConfiguration;
  tile_prefix_kernel<<<1, 1024, 0, s>>>(offsets, E, bm, tile_scratch);
  const int64_t tiles = (M + bm - 1) / bm + E;
  const int64_t ntiles = (N + bn - 1) / bn;
  if (tiles > 0x7fffffff || ntiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(ntiles));
  if (thin) {
    grouped_fma_thin_kernel<<<grid, 256, thin_smem(), s>>>(a);
    return cudaGetLastError();
  }
  if (fp32) {
    grouped_fma_kernel<false><<<grid, 256, fma_smem(), s>>>(a);
    return cudaGetLastError();
  }
  if (skinny) return launch_tile<kSkM, kSkN, kSkWM, kSkWN, false>(pol, a, grid, s);
  // Hopper: the wgmma kernel (grouped_gemm_wgmma.cu) for vector operands; its row tiles are kBigM's.
  static_assert(kBigM == kGroupedWgmmaRows, "the wgmma kernel shares the tile map");
  if (a.a_vec && a.b_vec && grouped_gemm_wgmma_fits(pol))
    return launch_grouped_gemm_wgmma(pol, x, w, trans_w, offsets, tile_scratch, E, tiles, N, K, y, alpha, beta, lora,
                                     s);
  return launch_tile<kBigM, kBigN, kBigWM, kBigWN, false>(pol, a, grid, s);
}

bool grouped_gemm_lora_fusable(const KernelPolicy& pol, const void* x, const void* w, bool trans_w, int64_t N, int64_t K,
                               const GroupedLora& lora) {
  // The launcher's path to the wgmma kernel: bf16, big N, vector operands.
  return N > kSkN && aligned16(x) && aligned16(w) && K % 8 == 0 && (trans_w ? K : N) % 8 == 0 &&
         grouped_gemm_wgmma_fits(pol) && grouped_gemm_wgmma_lora_fits(pol, trans_w, N, K, lora);
}

cudaError_t launch_grouped_gemm_wgrad(const KernelPolicy& pol, const void* pa, const void* pb, bool fp32, const int32_t* offsets, int E,
                                      int64_t M, int64_t N, int64_t K, KOut g, float alpha, float beta, cudaStream_t s) {
  if (E < 1 || E > 65535) return cudaErrorInvalidValue;
  if (N == 0 || K == 0) return cudaGetLastError();
  (void)M;
  TileArgs a{};
  // C = G_e [N, K]: A(m, k) = a[r, m] (stride 1 along m, N along the rows r), B(n, k) = b[r, n].
  a.a = pa;
  a.a_sm = 1;
  a.a_sk = N;
  a.b = pb;
  a.b_sn = 1;
  a.b_sk = K;
  a.a_vec = aligned16(pa) && N % 8 == 0;
  a.b_vec = aligned16(pb) && K % 8 == 0;
  a.c = g;
  a.ldc = K;
  a.c_se = N * K;
  a.offsets = offsets;
  a.E = E;
  a.M = N;
  a.N = K;
  a.alpha = alpha;
  a.beta = beta;
  // Tile shape (bf16): rank rows (gA: N <= 16 < K), rank columns (gB: K <= 16), skinny columns, big.
  const bool rank_rows = !fp32 && N <= kRkM && K > kRkM, rank_cols = !fp32 && !rank_rows && K <= kRkM;
  const bool skinny = K <= kSkN;
  const int bm = fp32 ? kFM : rank_rows ? kRkM : rank_cols ? kRkLong : skinny ? kSkM : kBigM;
  const int bn = fp32 ? kFN : rank_rows ? kRkLong : rank_cols ? kRkM : skinny ? kSkN : kBigN;
  if (!default_smem_fits(pol, fp32 ? fma_smem() : tile_smem(bm, bn))) return cudaErrorInvalidConfiguration;
  const int64_t mt = (N + bm - 1) / bm, nt = (K + bn - 1) / bn;
  if (mt > 0x7fffffff || nt > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(mt), static_cast<unsigned>(nt), static_cast<unsigned>(E));
  if (fp32) {
    grouped_fma_kernel<true><<<grid, 256, fma_smem(), s>>>(a);
    return cudaGetLastError();
  }
  // Rank-fitted tiles with both operands row-contiguous in the ring (N, K > 1: neither is k-major): the i-major ring.
  if ((rank_rows || rank_cols) && a.a_vec && a.b_vec && N > 1 && K > 1) {
    cudaError_t e = rank_rows ? launch_rank<kRkM, kRkLong, 1, kRkWarps>(pol, a, grid, s)
                              : launch_rank<kRkLong, kRkM, kRkWarps, 1>(pol, a, grid, s);
    if (e != cudaErrorInvalidConfiguration) return e;
  }
  if (rank_rows) return launch_tile<kRkM, kRkLong, 1, kRkWarps, true>(pol, a, grid, s);
  if (rank_cols) return launch_tile<kRkLong, kRkM, kRkWarps, 1, true>(pol, a, grid, s);
  if (skinny) return launch_tile<kSkM, kSkN, kSkWM, kSkWN, true>(pol, a, grid, s);
  return launch_tile<kBigM, kBigN, kBigWM, kBigWN, true>(pol, a, grid, s);
}

#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
