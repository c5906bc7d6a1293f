// The forward-form grouped expert GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a): the contract of
// grouped_mma_pipe_kernel<128, 128, ., ., false> (grouped_gemm.cu) for bf16 operands that allow 16-byte
// vectors (x rows and W_e rows 16-byte aligned, K and the weight's contiguous extent multiples of 8: every
// expert GEMM of a real model), chosen there under the Hopper kernel policy.
//   y[r] (=) alpha·x[r]·op(W_e) + beta·y[r] for r in expert e's rows [off[e], off[e+1]).
// One block of two warpgroups per (expert row tile of 128, 256 output columns), mapped through tile_off as the
// mma.sync kernels are; warpgroup g owns rows 64g .. 64g + 63 of the tile and all 256 columns (m64n256k16,
// 128 fp32 accumulators a thread), and skips its products where the tile's valid rows end before them (the
// ragged last tile of an expert: ~T·k/E rows an expert, so about half the experts end in a mostly empty tile).
// Operands reach shared memory by cp.async (zero fill outside the matrix) in kStages = 8 slots of BK = 32, in
// the no-swizzle core-matrix layout of common/wgmma.cuh, kStages - 2 k-steps in flight ahead of the one the
// tensor cores read and one wgmma group in flight behind it:
//   A = x rows, K-major: element (m, k) at core_offset<32>(m, k) (LBO 128, SBO 512).
//   B = W_e [N, K] (trans_w, K-major): (n, k) at core_offset<32>(n, k) (LBO 128, SBO 512);
//       W_e [K, N] (dX products, MN-major): (k, n) at core_offset<256>(k, n) (LBO 4096, SBO 128).
// Each warp's cp.async instruction fills one 512-byte run of shared memory (8 rows x 4 16-byte pieces, or
// 8 k x 4 pieces): conflict-free stores, and the two 16-byte halves of each 32-byte sector read by the same
// instruction.
// Why 128 x 256: the expert GEMMs (~128 rows an expert) are bound by operand traffic from L2, not by the
// tensor cores: the same kernel with 128 x 128 tiles (m64n128, two blocks per SM) ran no faster than the
// mma.sync ring kernel (35B-A3B shape, H200, ncu: 20.1 against 19.5 ms a step); the wider tile loads 25% fewer
// bytes per product and took 17.6 ms (docs/perf/PERF_NOTES.md, session 27). BK 64 x 4 slots: the same step time.
// Numerics: bf16 products, fp32 accumulation in k order by 16s, as the mma.sync kernel (the k16 steps'
// internal order may differ in the last bits).
#include <cuda_bf16.h>

#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "common/mma.cuh"
#include "common/wgmma.cuh"
#include "moe/expert_row_tile.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
constexpr int BM = kGroupedWgmmaRows, BN = 256, BK = 32, NT = 256, kStages = 8;
constexpr uint32_t kATile = BM * BK * 2, kBTile = BN * BK * 2;  // bytes of one slot's operand tiles
constexpr uint32_t kSlotBytes = kATile + kBTile;                // A then B
constexpr size_t kSmem = size_t(kSlotBytes) * kStages;          // 192 KiB: one block per SM
constexpr int kAPieces = BM * BK / 8, kBPieces = BN * BK / 8;     // 16-byte pieces of the operand tiles
[[maybe_unused]] constexpr int kAcc = BN / 2;                                   // accumulators a thread (m64nBN)
static_assert(kAPieces % NT == 0 && kBPieces % NT == 0 && BK % 16 == 0 && BN == 256, "tile shape");

struct WgArgs {
  const bf16* x;
  const bf16* w;
  const int32_t* offsets;
  const int32_t* tile_off;
  KOut y;
  int64_t N, K;
  int E;
  float alpha, beta;
};

// The 16-byte pieces of one slot's operand tile: v in [0, kPieces), kPieces / NT a thread.
// K-major (128 rows i, BK k): piece (i, 8·kc) with i = 8·(v / (8·kKc)) + v % 8, kc = (v / 8) % kKc.
// MN-major (BK k, 128 n): piece (k, 8·nc) with k = 8·(v / (8·kNc)) + v % 8, nc = (v / 8) % kNc.
// Eight consecutive threads take one core matrix (8 rows of 16 bytes, contiguous in shared memory).
template <bool TRANS_W>
__global__ void __launch_bounds__(NT, 1) grouped_wgmma_kernel(WgArgs g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kKc = BK / 8, kNc = BN / 8;  // pieces along a K-major row, an MN-major one
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = mma::smem_addr(smem);
  ExpertRowTile rt;
  if (!expert_row_tile(g.tile_off, g.offsets, g.E, BM, rt)) return;
  const int e = rt.e;
  const int64_t r0 = rt.r0;
  const int64_t n0 = int64_t(rt.ntile) * BN;
  const int mlim = static_cast<int>(min(int64_t(BM), int64_t(g.offsets[e + 1]) - r0));
  const int nlim = static_cast<int>(min(int64_t(BN), g.N - n0));
  const int64_t K = g.K;
  const bf16* pa = g.x + r0 * K;
  const bf16* pb = g.w + int64_t(e) * g.N * K + (TRANS_W ? n0 * K : n0);
  const int nk = static_cast<int>((K + BK - 1) / BK);

  auto issue = [&](int kt) {
    const uint32_t slot = sbase + (kt % kStages) * kSlotBytes;
    const int64_t k0 = int64_t(kt) * BK;
#pragma unroll
    for (int q = 0; q < kAPieces / NT; ++q) {  // A: x rows, k contiguous
      const int v = threadIdx.x + q * NT;
      const int i = (v / (8 * kKc)) * 8 + (v & 7), kc = (v >> 3) % kKc;  // K-major piece (i, 8·kc)
      const bool ok = i < mlim && k0 + kc * 8 < K;
      mma::cp_async16(slot + wgmma::core_offset<BK>(i, kc * 8), ok ? pa + i * K + k0 + kc * 8 : g.x, ok);
    }
#pragma unroll
    for (int q = 0; q < kBPieces / NT; ++q) {
      const int v = threadIdx.x + q * NT;
      if constexpr (TRANS_W) {  // W_e rows n, k contiguous
        const int i = (v / (8 * kKc)) * 8 + (v & 7), kc = (v >> 3) % kKc;
        const bool ok = i < nlim && k0 + kc * 8 < K;
        mma::cp_async16(slot + kATile + wgmma::core_offset<BK>(i, kc * 8), ok ? pb + i * K + k0 + kc * 8 : g.w, ok);
      } else {  // W_e rows k, n contiguous: piece (k, 8·nc)
        const int k = (v / (8 * kNc)) * 8 + (v & 7), nc = (v >> 3) % kNc;
        const bool ok = k0 + k < K && nc * 8 < nlim;
        mma::cp_async16(slot + kATile + wgmma::core_offset<BN>(k, nc * 8), ok ? pb + (k0 + k) * g.N + nc * 8 : g.w,
                        ok);
      }
    }
  };

  const int wg = threadIdx.x >> 7;
  const bool active = 64 * wg < mlim;  // warpgroup-uniform: this warpgroup's rows hold any of the expert's
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < nk) issue(s);
    mma::cp_async_commit();  // one group per step, empty past the end, so wait_group counts steps
  }
  for (int kt = 0; kt < nk; ++kt) {
    mma::cp_async_wait<kStages - 3>();  // step kt's copies (this thread's) have landed
    wgmma::fence_proxy_async();          // ... and are visible to the tensor cores' reads
    __syncthreads();  // everyone's have; every warpgroup's products of step kt - 2 are done (wait<1> below)
    if (kt + kStages - 2 < nk) issue(kt + kStages - 2);  // into step kt - 2's slot
    mma::cp_async_commit();
    if (active) {
      const uint32_t slot = sbase + (kt % kStages) * kSlotBytes;
      const uint32_t a = slot + wg * (64 / 8) * (BK * 16), b = slot + kATile;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        const uint64_t da = wgmma::desc(a + (kk / 8) * 128, 128, BK * 16);
        const uint64_t db = TRANS_W ? wgmma::desc(b + (kk / 8) * 128, 128, BK * 16)
                                    : wgmma::desc(b + (kk / 8) * (BN * 16), BN * 16, 128);
        wgmma::mma_m64n256<0, TRANS_W ? 0 : 1>(acc, da, db, true);
      }
      wgmma::commit();
      wgmma::wait<1>();
    }
  }
  wgmma::wait<0>();
  wgmma::fence_operands(acc);
  mma::cp_async_wait<0>();
  if (!active) return;
  // Accumulator 4j + 2h + c: row 16w + lane/4 + 8h of the warpgroup's 64, column 8j + 2(lane % 4) + c.
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 64 * wg + 16 * w + (lane >> 2) + 8 * h;
    if (r >= mlim) continue;
    const int64_t row = (r0 + r) * g.N + n0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int n = 8 * j + 2 * (lane & 3);
      if (n >= nlim) continue;
      float v0 = g.alpha * acc[4 * j + 2 * h], v1 = g.alpha * acc[4 * j + 2 * h + 1];
      if (n + 1 < nlim) {
        if (g.beta != 0.f) {
          v0 += g.beta * ld(g.y, row + n);
          v1 += g.beta * ld(g.y, row + n + 1);
        }
        st_pair(g.y, row + n, v0, v1);
      } else {  // N odd (W_e [N, K] allows any N): the last column alone
        if (g.beta != 0.f) v0 += g.beta * ld(g.y, row + n);
        st(g.y, row + n, v0);
      }
    }
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

bool grouped_gemm_wgmma_fits(const KernelPolicy& pol) { return pol.hopper() && pol.smem_fits(kSmem); }

cudaError_t launch_grouped_gemm_wgmma(const KernelPolicy& pol, const void* x, const void* w, bool trans_w,
                                      const int32_t* offsets, const int32_t* tile_off, int E, int64_t row_tiles,
                                      int64_t N, int64_t K, KOut y, float alpha, float beta, cudaStream_t s) {
  if (!grouped_gemm_wgmma_fits(pol) || (trans_w ? K : N) % 8 != 0 || K % 8 != 0) return cudaErrorInvalidConfiguration;
  const int64_t ntiles = (N + BN - 1) / BN;
  if (row_tiles > 0x7fffffff || ntiles > 65535) return cudaErrorInvalidValue;
  WgArgs a{static_cast<const bf16*>(x), static_cast<const bf16*>(w), offsets, tile_off, y, N, K, E, alpha, beta};
  auto* kernel = trans_w ? grouped_wgmma_kernel<true> : grouped_wgmma_kernel<false>;
  cudaError_t err = set_launch_smem(pol, kernel, kSmem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(ntiles)), NT, kSmem, s>>>(a);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
