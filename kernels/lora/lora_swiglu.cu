// SwiGLU with the LoRA rank-r terms of its neighbours, r = 16, so that no rank-r term is written on its own:
//   forward:  h (=) silu(g + ag·ug·Bgᵀ) ⊙ (u + au·uu·Buᵀ) on the gate/up base products g, u (the sums written back
//             over g and u with keep_sums, for swiglu_bwd);
//   backward: dh' = dh + dr·A (the down projection's rank-r term of dx), dg (=) dh'·u·silu'(g), du (=) dh'·silu(g).
// Before, lora_up wrote each term in full and the base GEMM read it back (beta = 1); here the base GEMMs write
// their products alone and this kernel adds the terms while it reads them for SwiGLU.
// Layout: a block takes 128 tokens x 64 columns. Its tiles (padded rows) are copied to shared memory by cp.async in
// two groups, with its u / dr rows and B / A columns: the gate's operands first, so that the gate's sums (forward) or
// the rank-r product (backward) are formed while the rest lands. Each warp works on its 16 rows in the mma layout
// (one mma k-step per 16 x 8 block; the 4-byte reads of the padded rows fall on distinct banks), writes its results
// over the tiles it has read (each lane only the pairs it read), and sends its rows out as 16-byte row pieces.
// Forward: 54 KiB, four blocks an SM; with keep_sums the sums go out before h is written over the gate tile.
// Backward: 62 KiB (76 KiB with the gate/up terms), three blocks an SM. bf16 pairs are held as 32-bit words
// (pack_rn / lo / hi).
// Arithmetic per element as the ops it replaces: each sum rounded to bf16 once (a GEMM with beta = 1 into the base
// product rounds the same way), SwiGLU on the rounded sums in fp32 (swiglu_fwd / swiglu_bwd). The sigmoid is
// sigmoidf_'s, without its reciprocal's slow-path check where every gate of the warp's 16 x 64 is above -87
// (sigmoid_rn.cuh): the same bits. The choice is per warp, not per lane: both paths hold the rank-r ldmatrix / mma,
// which are .aligned (the whole warp must execute them together; a per-lane choice split warps there).
#include <cuda_bf16.h>

#include <cstddef>

#include "common/device.cuh"
#include "common/mma.cuh"
#include "lora/lora.cuh"
#include "lora/lora_rank16_tile.cuh"
#include "lora/sigmoid_rn.cuh"

namespace deltatune::kernels {
namespace {

using namespace lora_rank16;
constexpr int kCols = kHalf;     // columns per block
constexpr int kLdN = kCols + 8;  // padded A rows [r][64 columns]
constexpr int kLdT = kCols + 8;  // padded tile rows (mma-layout reads and writes on distinct banks)
static_assert(kThreads == 2 * kTileT && kThreads % (kCols / 8) == 0, "one [*, 16] row piece a thread");

// 16-byte copy global -> shared with no bounds (whole tiles).
__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// The block's [128, 64] tile of a [T, N] bf16 tensor into dst (row stride kLdT): thread i copies piece i % 8 of
// rows i / 8 + 32·j. Pieces past T or N become zeros; `full` (the tile lies inside) skips the checks.
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t t0, int64_t n0, int64_t T, int64_t N,
                                          bool full) {
  constexpr int kRowsPass = kThreads / (kCols / 8);
  constexpr uint32_t kStep = kRowsPass * kLdT * sizeof(bf16);
  const int r = threadIdx.x / (kCols / 8), c = 8 * (threadIdx.x % (kCols / 8));
  const uint32_t d = mma::smem_addr(dst + r * kLdT + c);
  const bf16* s = src + (t0 + r) * N + n0 + c;
  if (full) {
#pragma unroll
    for (int j = 0; j < kTileT / kRowsPass; ++j) cp16(d + j * kStep, s + j * kRowsPass * N);
  } else {
    const bool col_ok = n0 + c < N;
#pragma unroll
    for (int j = 0; j < kTileT / kRowsPass; ++j) {
      const bool ok = col_ok && t0 + r + j * kRowsPass < T;
      mma::cp_async16(d + j * kStep, ok ? s + j * kRowsPass * N : src, ok);
    }
  }
}

// [128, 16] operand rows (u, dr) unpadded: 32-byte rows whose two 16-byte pieces swap every 4 rows, so that the
// 8 rows an ldmatrix reads fall on distinct banks. Offset of piece q of row r:
__device__ __forceinline__ int rows16_at(int r, int q) { return r * kR + 8 * (q ^ ((r >> 2) & 1)); }
// The mma A fragment of the warp's 16 rows of such a tile.
__device__ __forceinline__ void ldsm_rows16(uint32_t (&a)[4], const bf16* tile, int warp, int lane) {
  mma::ldsm_x4(a, mma::smem_addr(&tile[rows16_at(16 * warp + (lane & 15), lane >> 4)]));
}

// Rows t0 .. t0 + 127 of a [T, 16] bf16 column block (row stride ld) into dst (rows16_at), one piece a thread;
// rows past T become zeros.
__device__ __forceinline__ void load_rows16(bf16* dst, const bf16* src, int64_t ld, int64_t t0, int64_t T) {
  const int r = threadIdx.x / 2, q = threadIdx.x % 2;
  const bool ok = t0 + r < T;
  mma::cp_async16(mma::smem_addr(dst + rows16_at(r, q)), ok ? src + (t0 + r) * ld + 8 * q : src, ok);
}

// Rows n0 .. n0 + 63 of a [N, 16] bf16 matrix (contiguous) into dst (row stride kLdA), by threads 0-127; rows past
// N become zeros.
__device__ __forceinline__ void load_cols16(bf16* dst, const bf16* src, int64_t n0, int64_t N) {
  if (threadIdx.x >= 2 * kCols) return;
  const int r = threadIdx.x / 2, q = threadIdx.x % 2;
  const bool ok = n0 + r < N;
  mma::cp_async16(mma::smem_addr(dst + r * kLdA + 8 * q), ok ? src + (n0 + r) * kR + 8 * q : src, ok);
}

// The warp's 16 tile rows out to dst [T, N] as 16-byte row pieces.
__device__ __forceinline__ void store_rows(bf16* dst, const bf16* tile, int warp, int lane, int64_t t0, int64_t n0,
                                           int64_t T, int64_t N, bool full) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = 16 * warp + 4 * i + lane / 8, c = 8 * (lane % 8);
    if (full || (t0 + r < T && n0 + c < N))
      *reinterpret_cast<uint4*>(dst + (t0 + r) * N + n0 + c) = *reinterpret_cast<const uint4*>(&tile[r * kLdT + c]);
  }
}

// Offset of this lane's pair (row r0 + 8·hf, columns 8·nb + 2·t4, + 1) of the mma layout in a kLdT tile.
__device__ __forceinline__ int at(int r0, int hf, int nb, int t4) { return (r0 + 8 * hf) * kLdT + nb * 8 + 2 * t4; }
// A bf16 pair as one 32-bit word (low half the first element): kept that way so the compiler does not split it.
__device__ __forceinline__ uint32_t& pair(bf16* tile, int off) { return *reinterpret_cast<uint32_t*>(&tile[off]); }
__device__ __forceinline__ float lo(uint32_t p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float hi(uint32_t p) { return __uint_as_float(p & 0xffff0000u); }
// (a, b) rounded to bf16 (round to nearest even, as __floats2bfloat162_rn) as one word.
__device__ __forceinline__ uint32_t pack_rn(float a, float b) {
  uint32_t p;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(b), "f"(a));
  return p;
}
// Elementwise minimum of two bf16 pairs; NaN if either element is.
__device__ __forceinline__ uint32_t min_nan(uint32_t a, uint32_t b) {
  uint32_t m;
  asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
}
// Both elements of the pair above kSigmoidFastMin (false for NaN).
__device__ __forceinline__ bool fast_ok(uint32_t m) { return lo(m) > kSigmoidFastMin && hi(m) > kSigmoidFastMin; }
// fast_ok for every lane of the warp (the same answer in all lanes, so a branch on it keeps the warp together).
__device__ __forceinline__ bool warp_fast_ok(uint32_t m) { return __all_sync(0xffffffffu, fast_ok(m)); }
constexpr uint32_t kPairMax = 0x7f7f7f7fu;  // two large finite bf16

// alpha·acc + base, each rounded to bf16 once (no fused multiply-add: __fmul_rn / __fadd_rn, as the staged
// kernels did), as a pair.
__device__ __forceinline__ uint32_t sum_pair(float a0, float a1, float alpha, uint32_t base) {
  return pack_rn(__fadd_rn(__fmul_rn(alpha, a0), lo(base)), __fadd_rn(__fmul_rn(alpha, a1), hi(base)));
}

template <bool kFast> __device__ __forceinline__ float sigmoid_(float x) {
  if constexpr (kFast) return sigmoid_fast(x);
  else return sigmoidf_(x);
}

// The backward's tiles; the gate/up terms' operands (ug .. bu) only with kTerms (launched with less memory
// without: kBwdSmemBase).
struct BwdSmem {
  bf16 dh[kTileT * kLdT], g[kTileT * kLdT], u[kTileT * kLdT];
  bf16 dr[kTileT * kR];
  bf16 a[kR * kLdN];
  bf16 ug[kTileT * kR], uu[kTileT * kR];
  bf16 bg[kCols * kLdA], bu[kCols * kLdA];
};
constexpr size_t kBwdSmemBase = offsetof(BwdSmem, ug);

struct FwdSmem {
  bf16 g[kTileT * kLdT], u[kTileT * kLdT];  // h goes into g once g is read (and, with keep, written out)
  bf16 ug[kTileT * kR], uu[kTileT * kR];
  bf16 bg[kCols * kLdA], bu[kCols * kLdA];
};

// For each of the lane's pairs of the warp's 16 rows x 64 columns: the sum alpha·(fa rows · B columns) + base
// tile, rounded to bf16 as sum_pair does, handed to f(nb, hf, off, sum) (nb: 8-column block, hf: row half, off:
// the pair's tile offset). The rank-r product runs per 32 columns.
template <class F>
__device__ __forceinline__ void for_each_sum_pair(const uint32_t (&fa)[4], const bf16* bs, float alpha, bf16* base,
                                                  int r0, int t4, int lane, F&& f) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    float acc[4][4];
    rank_r_nk<32>(acc, fa, bs, 32 * p, lane);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int nb = 4 * p + j, off = at(r0, hf, nb, t4);
        f(nb, hf, off, sum_pair(acc[j][2 * hf], acc[j][2 * hf + 1], alpha, pair(base, off)));
      }
  }
}

// The forward's second half: the up sums (written back over u with kKeep) and h = silu(g)·u of the rounded sums
// into hp.
template <bool kKeep, bool kFast>
__device__ __forceinline__ void fwd_up_h(FwdSmem& sm, const uint32_t (&fu)[4], float au, const uint32_t (&gp)[8][2],
                                         uint32_t (&hp)[8][2], int r0, int t4, int lane) {
  for_each_sum_pair(fu, sm.bu, au, sm.u, r0, t4, lane, [&](int nb, int hf, int off, uint32_t us) {
    if (kKeep) pair(sm.u, off) = us;
    const float g0 = lo(gp[nb][hf]), g1 = hi(gp[nb][hf]);
    hp[nb][hf] = pack_rn(g0 * sigmoid_<kFast>(g0) * lo(us), g1 * sigmoid_<kFast>(g1) * hi(us));
  });
}

template <bool kKeep>
__global__ void __launch_bounds__(kThreads, 4)
    lora_swiglu_fwd_kernel(const bf16* __restrict__ ug, int64_t ldug, const bf16* __restrict__ uu, int64_t lduu,
                           const bf16* __restrict__ Bg, const bf16* __restrict__ Bu, float ag, float au,
                           bf16* __restrict__ g, bf16* __restrict__ u, bf16* __restrict__ h, int64_t T, int64_t N) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  FwdSmem& sm = *reinterpret_cast<FwdSmem*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kCols;
  const bool full = t0 + kTileT <= T && n0 + kCols <= N;
  // Two copy groups: the gate's operands, then the up's, so that the gate sums are formed while the up tile lands.
  load_rows16(sm.ug, ug, ldug, t0, T);
  load_cols16(sm.bg, Bg, n0, N);
  load_tile(sm.g, g, t0, n0, T, N, full);
  mma::cp_async_commit();
  load_rows16(sm.uu, uu, lduu, t0, T);
  load_cols16(sm.bu, Bu, n0, N);
  load_tile(sm.u, u, t0, n0, T, N, full);
  mma::cp_async_commit();
  mma::cp_async_wait<1>();
  __syncthreads();
  const int r0 = 16 * warp + lane / 4, t4 = lane % 4;
  uint32_t fg[4], fu[4];
  ldsm_rows16(fg, sm.ug, warp, lane);
  // The gate sums, kept as bf16 pairs (they are rounded to bf16 anyway), and their minimum for sigmoid_fast.
  uint32_t gp[8][2], gmin = kPairMax;
  for_each_sum_pair(fg, sm.bg, ag, sm.g, r0, t4, lane, [&](int nb, int hf, int off, uint32_t gs) {
    gp[nb][hf] = gs;
    if (kKeep) pair(sm.g, off) = gs;
    gmin = min_nan(gmin, gs);
  });
  mma::cp_async_wait<0>();
  __syncthreads();
  ldsm_rows16(fu, sm.uu, warp, lane);
  uint32_t hp[8][2];
  if (warp_fast_ok(gmin))
    fwd_up_h<kKeep, true>(sm, fu, au, gp, hp, r0, t4, lane);
  else
    fwd_up_h<kKeep, false>(sm, fu, au, gp, hp, r0, t4, lane);
  if (kKeep) {  // the sums out first: h then goes over the gate tile
    __syncwarp();
    store_rows(g, sm.g, warp, lane, t0, n0, T, N, full);
    store_rows(u, sm.u, warp, lane, t0, n0, T, N, full);
    __syncwarp();
  }
#pragma unroll
  for (int nb = 0; nb < 8; ++nb)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) pair(sm.g, at(r0, hf, nb, t4)) = hp[nb][hf];
  __syncwarp();
  store_rows(h, sm.g, warp, lane, t0, n0, T, N, full);
}

// acc (=) the warp's 16 dr rows (fragment a) · A columns [c0, c0 + 32) (A tile as [k][n] rows: the transposed
// loads give the col-major B operand); acc[j] is the 16 x 8 block of columns c0 + 8·j.
__device__ __forceinline__ void rank_r32_kn(float (&acc)[4][4], const uint32_t (&a)[4], const bf16* as, int c0,
                                            int lane) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    uint32_t b[4];
    mma::ldsm_x4_t(b, mma::smem_addr(&as[(lane & 15) * kLdN + c0 + 16 * p + (lane >> 4) * 8]));
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[2 * p][e] = acc[2 * p + 1][e] = 0.f;
    mma::mma16816(acc[2 * p], a, b[0], b[1]);
    mma::mma16816(acc[2 * p + 1], a, b[2], b[3]);
  }
}

// The backward's combine in the mma layout, per 32 columns: dh' = dr·A + dh rounded once, (with kTerms) the up sum
// u + au·uu·Buᵀ as the forward forms it, dg = dh'·u·silu'(g) over dh, du = dh'·silu(g) over g (each lane writes
// only the pairs it read). gp: the gate (or its sum) of the lane's pairs.
template <bool kTerms, bool kFast>
__device__ __forceinline__ void bwd_combine(BwdSmem& sm, const uint32_t (&fd)[4], const uint32_t (&fu)[4], float au,
                                            const uint32_t (&gp)[8][2], int r0, int t4, int lane) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    float acc[4][4], accu[4][4];
    rank_r32_kn(acc, fd, sm.a, 32 * p, lane);
    if constexpr (kTerms) rank_r_nk<32>(accu, fu, sm.bu, 32 * p, lane);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int nb = 4 * p + j, off = at(r0, hf, nb, t4);
        const uint32_t d = pair(sm.dh, off);
        uint32_t up = pair(sm.u, off);
        if constexpr (kTerms) up = sum_pair(accu[j][2 * hf], accu[j][2 * hf + 1], au, up);
        const uint32_t dv = pack_rn(acc[j][2 * hf] + lo(d), acc[j][2 * hf + 1] + hi(d));
        const float g0 = lo(gp[nb][hf]), g1 = hi(gp[nb][hf]), s0 = sigmoid_<kFast>(g0), s1 = sigmoid_<kFast>(g1);
        pair(sm.dh, off) = pack_rn(lo(dv) * lo(up) * (s0 * (1.f + g0 * (1.f - s0))),
                                   hi(dv) * hi(up) * (s1 * (1.f + g1 * (1.f - s1))));
        pair(sm.g, off) = pack_rn(lo(dv) * (g0 * s0), hi(dv) * (g1 * s1));
      }
  }
}

// With kTerms, g and u are the base products and the sums are formed here as the forward forms them (so the
// forward need not write them back for the backward).
template <bool kTerms>
__global__ void __launch_bounds__(kThreads, 3)
    lora_swiglu_bwd_kernel(const bf16* __restrict__ dh, const bf16* __restrict__ dr, const bf16* __restrict__ A,
                           const bf16* __restrict__ g, const bf16* __restrict__ u, bf16* __restrict__ dg,
                           bf16* __restrict__ du, int64_t T, int64_t N, const bf16* __restrict__ ug, int64_t ldug,
                           const bf16* __restrict__ uu, int64_t lduu, const bf16* __restrict__ Bg,
                           const bf16* __restrict__ Bu, float ag, float au) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  BwdSmem& sm = *reinterpret_cast<BwdSmem*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.y) * kTileT, n0 = int64_t(blockIdx.x) * kCols;
  const bool full = t0 + kTileT <= T && n0 + kCols <= N;
  // Two copy groups: dr, A and the gate's operands first (the gate's minimum), then dh and the up's.
  load_rows16(sm.dr, dr, kR, t0, T);
  if (threadIdx.x < kR * (kCols / 8)) {  // A [16, N] columns n0 .. n0 + 63: 16 rows x 8 pieces of 8
    const int k = threadIdx.x / (kCols / 8), q = threadIdx.x % (kCols / 8);
    const bool ok = n0 + 8 * q < N;
    mma::cp_async16(mma::smem_addr(&sm.a[k * kLdN + 8 * q]), ok ? A + k * N + n0 + 8 * q : A, ok);
  }
  if constexpr (kTerms) {
    load_rows16(sm.ug, ug, ldug, t0, T);
    load_cols16(sm.bg, Bg, n0, N);
  }
  load_tile(sm.g, g, t0, n0, T, N, full);
  mma::cp_async_commit();
  if constexpr (kTerms) {
    load_rows16(sm.uu, uu, lduu, t0, T);
    load_cols16(sm.bu, Bu, n0, N);
  }
  load_tile(sm.dh, dh, t0, n0, T, N, full);
  load_tile(sm.u, u, t0, n0, T, N, full);
  mma::cp_async_commit();
  mma::cp_async_wait<1>();
  __syncthreads();
  const int r0 = 16 * warp + lane / 4, t4 = lane % 4;
  uint32_t gp[8][2], gmin = kPairMax;
  if constexpr (kTerms) {
    uint32_t fg[4];
    ldsm_rows16(fg, sm.ug, warp, lane);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      float acc[4][4];
      rank_r_nk<32>(acc, fg, sm.bg, 32 * p, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int nb = 4 * p + j;
          gp[nb][hf] = sum_pair(acc[j][2 * hf], acc[j][2 * hf + 1], ag, pair(sm.g, at(r0, hf, nb, t4)));
          gmin = min_nan(gmin, gp[nb][hf]);
        }
    }
  } else {
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        gp[nb][hf] = pair(sm.g, at(r0, hf, nb, t4));
        gmin = min_nan(gmin, gp[nb][hf]);
      }
  }
  uint32_t fd[4], fu[4] = {};
  ldsm_rows16(fd, sm.dr, warp, lane);
  mma::cp_async_wait<0>();
  __syncthreads();
  if constexpr (kTerms) ldsm_rows16(fu, sm.uu, warp, lane);
  if (warp_fast_ok(gmin))
    bwd_combine<kTerms, true>(sm, fd, fu, au, gp, r0, t4, lane);
  else
    bwd_combine<kTerms, false>(sm, fd, fu, au, gp, r0, t4, lane);
  __syncwarp();
  store_rows(dg, sm.dh, warp, lane, t0, n0, T, N, full);
  store_rows(du, sm.g, warp, lane, t0, n0, T, N, full);
}

// Dynamic shared memory above the 48 KiB default: the opt-in is per device, so it is set at every launch (a
// host-side attribute, not a stream operation), with the carveout at its most so that four (forward) / three
// (backward) blocks fit an SM.
template <class Kernel>
cudaError_t opt_in(Kernel kernel, size_t smem) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  return e;
}

dim3 grid_of(int64_t T, int64_t N) {
  return dim3(static_cast<unsigned>((N + kCols - 1) / kCols), static_cast<unsigned>((T + kTileT - 1) / kTileT));
}

bool al16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool lora_swiglu_fwd_takes(const LoraSwigluArgs& a) {
  return a.rg == kR && a.ru == kR && a.T > 0 && a.N > 0 && a.N % 8 == 0 && a.ldug % 8 == 0 && a.lduu % 8 == 0 &&
         al16(a.ug) && al16(a.uu) && al16(a.Bg) && al16(a.Bu) && al16(a.g) && al16(a.u) && al16(a.h);
}

cudaError_t launch_lora_swiglu_fwd(const LoraSwigluArgs& a, cudaStream_t s) {
  if (!lora_swiglu_fwd_takes(a)) return cudaErrorInvalidValue;
  const size_t smem = sizeof(FwdSmem);
  const auto kernel = a.keep_sums ? lora_swiglu_fwd_kernel<true> : lora_swiglu_fwd_kernel<false>;
  if (const cudaError_t e = opt_in(kernel, smem); e != cudaSuccess) return e;
  kernel<<<grid_of(a.T, a.N), kThreads, smem, s>>>(
      static_cast<const bf16*>(a.ug), a.ldug, static_cast<const bf16*>(a.uu), a.lduu, static_cast<const bf16*>(a.Bg),
      static_cast<const bf16*>(a.Bu), a.ag, a.au, static_cast<bf16*>(a.g), static_cast<bf16*>(a.u),
      static_cast<bf16*>(a.h), a.T, a.N);
  return cudaGetLastError();
}

bool lora_swiglu_bwd_takes(const LoraSwigluBwdArgs& a) {
  const bool terms = a.ug == nullptr ||
                     (a.rg == kR && a.ru == kR && a.ldug % 8 == 0 && a.lduu % 8 == 0 && al16(a.ug) && al16(a.uu) &&
                      al16(a.Bg) && al16(a.Bu));
  return a.r == kR && a.T > 0 && a.N > 0 && a.N % 8 == 0 && al16(a.dh) && al16(a.dr) && al16(a.A) && al16(a.g) &&
         al16(a.u) && al16(a.dg) && al16(a.du) && terms;
}

cudaError_t launch_lora_swiglu_bwd(const LoraSwigluBwdArgs& a, cudaStream_t s) {
  if (!lora_swiglu_bwd_takes(a)) return cudaErrorInvalidValue;
  const bool terms = a.ug != nullptr;
  const size_t smem = terms ? sizeof(BwdSmem) : kBwdSmemBase;
  const auto kernel = terms ? lora_swiglu_bwd_kernel<true> : lora_swiglu_bwd_kernel<false>;
  if (const cudaError_t e = opt_in(kernel, smem); e != cudaSuccess) return e;
  kernel<<<grid_of(a.T, a.N), kThreads, smem, s>>>(
      static_cast<const bf16*>(a.dh), static_cast<const bf16*>(a.dr), static_cast<const bf16*>(a.A),
      static_cast<const bf16*>(a.g), static_cast<const bf16*>(a.u), static_cast<bf16*>(a.dg), static_cast<bf16*>(a.du),
      a.T, a.N, static_cast<const bf16*>(a.ug), a.ldug, static_cast<const bf16*>(a.uu), a.lduu,
      static_cast<const bf16*>(a.Bg), static_cast<const bf16*>(a.Bu), a.ag, a.au);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
