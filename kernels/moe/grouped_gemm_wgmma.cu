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
// LORA: the expert LoRA up-projection rides in the epilogue (launch_grouped_gemm with a GroupedLora):
//   y[r] (=) alpha·x[r]·op(W_e) + scale·u[r]·op(L_e) + beta·y[r], one rounding,
// with u F32 [M, r] and L_e F32 in the orientation of W_e (forward: B_e [N, r], dX: A_e [r, N]), r <= kLoraR
// (zero filled to kLoraR). The u rows and L columns of the tile reach shared memory by cp.async with the first
// k-step (24 KiB beside a ring of 7 slots: 192 KiB, as the plain kernel); the epilogue (lora_epilogue) sums Σ_k u·L in
// k order by fmaf from 0, the chain of grouped_fma_thin_kernel (grouped_gemm.cu), which ran this product as a
// separate read-modify-write of y (2.84 ms a 35B-A3B step, H200).
#include <cuda_bf16.h>

#include "common/bf16x8.cuh"
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
// The LoRA epilogue's operands beside the ring: u [BM][kLoraR] and L as [kLoraR][BN] (k-major rows of the tile's
// columns, whichever way L_e lies in memory).
constexpr int kLoraR = 16;
constexpr uint32_t kLoraU = BM * kLoraR * 4, kLoraL = kLoraR * BN * 4;
// The LoRA kernel's ring has kStagesLora = 7 slots, so that ring + LoRA operands stay at the plain kernel's 192 KiB
// (the same shared-memory carveout); 8 slots (216 KiB) ran the same step time (58.0 / 58.3 against 59.0 / 58.1 ms).
constexpr int kStagesLora = 7;
constexpr size_t kRingLora = size_t(kSlotBytes) * kStagesLora;
constexpr size_t kSmemLora = kRingLora + kLoraU + kLoraL;  // 192 KiB
static_assert(kSmemLora <= kSmem, "the LoRA kernel keeps the plain kernel's shared memory");
// UK: the A_e tiles (kLoraR rows x BK, bf16) ride in a side ring in the u tile's place (u is formed there later).
constexpr uint32_t kUSlot = kLoraR * BK * 2;
static_assert(kUSlot * kStagesLora <= kLoraU && kLoraR * BK / 8 <= NT, "the A_e side ring fits the u tile");
static_assert(BM * kLoraR / 4 == 2 * NT && BN == NT && kLoraR == 16, "LoRA tile pieces");

struct WgArgs {
  const bf16* x;
  const bf16* w;
  const int32_t* offsets;
  const int32_t* tile_off;
  KOut y;
  int64_t N, K;
  int E;
  float alpha, beta;
  const float* lu;  // LORA: u [M, lr], L [E, N, lr] (TRANS_W) or [E, lr, N]
  const float* ll;
  int lr;
  float lscale;
  const bf16* la;  // UK: A_e [E, lr, K] (bf16): u (=) x·A_eᵀ is formed in the kernel and written to uo [M, lr]
  float* uo;
};

// The LoRA epilogue of one warp: its 16 rows wr0 .. wr0 + 15 of the tile (the rows its accumulators hold), all
// 256 columns. alpha·acc goes to shared memory first (the ring, free now: C [BM][kCLd] fp32), then the warp walks
// its rows in a rolled loop, lane l owning columns 8l .. 8l + 7: their L values (8 x kLoraR) stay in registers,
// the row's u is a broadcast read, and the row's 8 outputs leave as one 16-byte store. (A first version summed
// u·L straight onto the accumulators, fully unrolled over the 32 column groups, ~3,000 instructions of
// straight-line code a tile: the fused GEMMs took 27.2 ms a 35B-A3B step against 17.1 for this one, ncu, H200.)
constexpr int kCLd = BN + 8;  // C rows: STS.64 of 8 rows x 4 column pairs in two wavefronts
static_assert(size_t(BM) * kCLd * 4 <= kRingLora, "the C tile fits in the ring");
__device__ __forceinline__ void lora_epilogue(const WgArgs& g, const float (&acc)[kAcc], float* cs, int64_t r0,
                                              int64_t n0, int mlim, int nlim, int wr0, int lane) {
  const float* us = cs + kRingLora / 4;             // u [BM][kLoraR]
  const float* ls = us + kLoraU / 4;                // L [kLoraR][BN]
  const int q = lane & 3;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(cs + (wr0 + (lane >> 2) + 8 * h) * kCLd + 8 * j + 2 * q) =
          make_float2(g.alpha * acc[4 * j + 2 * h], g.alpha * acc[4 * j + 2 * h + 1]);
  __syncwarp();
  const int c0 = 8 * lane;  // this lane's columns c0 .. c0 + 7 of the tile
  if (c0 >= nlim) return;
  float lr[8][kLoraR];
#pragma unroll
  for (int k = 0; k < kLoraR; ++k) {
    const float4 t0 = *reinterpret_cast<const float4*>(ls + k * BN + c0);
    const float4 t1 = *reinterpret_cast<const float4*>(ls + k * BN + c0 + 4);
    lr[0][k] = t0.x, lr[1][k] = t0.y, lr[2][k] = t0.z, lr[3][k] = t0.w;
    lr[4][k] = t1.x, lr[5][k] = t1.y, lr[6][k] = t1.z, lr[7][k] = t1.w;
  }
  const bool full = c0 + 8 <= nlim;
  const bool vec = full && g.y.t == KType::BF16 && g.N % 8 == 0 && (reinterpret_cast<uintptr_t>(g.y.p) & 15u) == 0;
#pragma unroll 1
  for (int i = 0; i < 16; ++i) {
    const int r = wr0 + i;
    if (r >= mlim) break;
    float u[kLoraR];
#pragma unroll
    for (int k4 = 0; k4 < kLoraR; k4 += 4) {
      const float4 t = *reinterpret_cast<const float4*>(us + r * kLoraR + k4);
      u[k4] = t.x, u[k4 + 1] = t.y, u[k4 + 2] = t.z, u[k4 + 3] = t.w;
    }
    const float4 a0 = *reinterpret_cast<const float4*>(cs + r * kCLd + c0);
    const float4 a1 = *reinterpret_cast<const float4*>(cs + r * kCLd + c0 + 4);
    Bf16x8 v{{a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}};
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      float lo = 0.f;  // Σ_k u·L in k order from 0: grouped_fma_thin_kernel's chain
#pragma unroll
      for (int k = 0; k < kLoraR; ++k) lo = fmaf(u[k], lr[c][k], lo);
      v.v[c] += g.lscale * lo;
    }
    const int64_t o = (r0 + r) * g.N + n0 + c0;
    if (vec && g.beta == 0.f) {
      st8(g.y.p, o / 8, v);
      continue;
    }
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if (c0 + c >= nlim) break;
      float x = v.v[c];
      if (g.beta != 0.f) x += g.beta * ld(g.y, o + c);
      st(g.y, o + c, x);
    }
  }
}

// The 16-byte pieces of one slot's operand tile: v in [0, kPieces), kPieces / NT a thread.
// K-major (128 rows i, BK k): piece (i, 8·kc) with i = 8·(v / (8·kKc)) + v % 8, kc = (v / 8) % kKc.
// MN-major (BK k, 128 n): piece (k, 8·nc) with k = 8·(v / (8·kNc)) + v % 8, nc = (v / 8) % kNc.
// Eight consecutive threads take one core matrix (8 rows of 16 bytes, contiguous in shared memory).
template <bool TRANS_W, bool LORA, bool UK>
__global__ void __launch_bounds__(NT, 1) grouped_wgmma_kernel(WgArgs g) {
  static_assert(!UK || (TRANS_W && LORA), "u is formed in the kernel only in the forward LoRA form");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kKc = BK / 8, kNc = BN / 8;  // pieces along a K-major row, an MN-major one
  constexpr int kSt = LORA ? kStagesLora : kStages;  // ring slots
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
    const uint32_t slot = sbase + (kt % kSt) * kSlotBytes;
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
    if constexpr (UK) {  // A_e rows (kLoraR x BK, K-major) into the side ring where u lands later
      if (threadIdx.x < kLoraR * BK / 8) {
        const int v = threadIdx.x, i = (v / (8 * kKc)) * 8 + (v & 7), kc = (v >> 3) % kKc;
        const bool ok = i < g.lr && k0 + kc * 8 < K;
        mma::cp_async16(sbase + uint32_t(kRingLora) + (kt % kSt) * kUSlot + wgmma::core_offset<BK>(i, kc * 8),
                        ok ? g.la + (int64_t(e) * g.lr + i) * K + k0 + kc * 8 : g.la, ok);
      }
    }
  };

  if constexpr (LORA) {  // in the first k-step's copy group: landed and visible after the loop's first barrier
    const uint32_t us = sbase + uint32_t(kRingLora), ls = us + kLoraU;
#pragma unroll
    for (int q = 0; q < 2; ++q) {  // u rows of the tile, 4 floats a piece (UK: formed below instead)
      const int v = threadIdx.x + q * NT, i = v >> 2, kc = (v & 3) * 4;
      const bool ok = i < mlim && kc < g.lr;
      if constexpr (!UK) mma::cp_async16(us + (i * kLoraR + kc) * 4, ok ? g.lu + (r0 + i) * g.lr + kc : g.lu, ok);
    }
    if constexpr (TRANS_W) {  // B_e rows n: (n, k) at ll[(e·N + n)·lr + k], 4-byte copies into [k][n]
      const int n = threadIdx.x;
#pragma unroll
      for (int k = 0; k < kLoraR; ++k) {
        const bool ok = n < nlim && k < g.lr;
        mma::cp_async4(ls + (k * BN + n) * 4, ok ? g.ll + (int64_t(e) * g.N + n0 + n) * g.lr + k : g.ll, ok);
      }
    } else {  // A_e rows k: (k, n) at ll[(e·lr + k)·N + n], 16-byte pieces
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int v = threadIdx.x + q * NT, k = v >> 6, nc = (v & 63) * 4;
        const bool ok = k < g.lr && nc < nlim;
        mma::cp_async16(ls + (k * BN + nc) * 4, ok ? g.ll + (int64_t(e) * g.lr + k) * g.N + n0 + nc : g.ll, ok);
      }
    }
  }
  const int wg = threadIdx.x >> 7;
  const bool active = 64 * wg < mlim;  // warpgroup-uniform: this warpgroup's rows hold any of the expert's
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  [[maybe_unused]] float uacc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // UK: m64n16 of u = x·A_eᵀ
#pragma unroll
  for (int s = 0; s < kSt - 2; ++s) {
    if (s < nk) issue(s);
    mma::cp_async_commit();  // one group per step, empty past the end, so wait_group counts steps
  }
  for (int kt = 0; kt < nk; ++kt) {
    mma::cp_async_wait<kSt - 3>();  // step kt's copies (this thread's) have landed
    wgmma::fence_proxy_async();          // ... and are visible to the tensor cores' reads
    __syncthreads();  // everyone's have; every warpgroup's products of step kt - 2 are done (wait<1> below)
    if (kt + kSt - 2 < nk) issue(kt + kSt - 2);  // into step kt - 2's slot
    mma::cp_async_commit();
    if (active) {
      const uint32_t slot = sbase + (kt % kSt) * kSlotBytes;
      const uint32_t a = slot + wg * (64 / 8) * (BK * 16), b = slot + kATile;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        const uint64_t da = wgmma::desc(a + (kk / 8) * 128, 128, BK * 16);
        const uint64_t db = TRANS_W ? wgmma::desc(b + (kk / 8) * 128, 128, BK * 16)
                                    : wgmma::desc(b + (kk / 8) * (BN * 16), BN * 16, 128);
        wgmma::mma_m64n256<0, TRANS_W ? 0 : 1>(acc, da, db, true);
        if constexpr (UK) {
          const uint32_t ua = sbase + uint32_t(kRingLora) + (kt % kSt) * kUSlot;
          wgmma::mma_m64n16<0, 0>(uacc, da, wgmma::desc(ua + (kk / 8) * 128, 128, BK * 16), true);
        }
      }
      wgmma::commit();
      wgmma::wait<1>();
    }
  }
  wgmma::wait<0>();
  wgmma::fence_operands(acc);
  if constexpr (UK) wgmma::fence_operands(uacc);
  mma::cp_async_wait<0>();
  if constexpr (LORA) __syncthreads();  // every warpgroup's products are done: the ring becomes the C tile
  if (!active) return;
  // Accumulator 4j + 2h + c: row 16w + lane/4 + 8h of the warpgroup's 64, column 8j + 2(lane % 4) + c.
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
  if constexpr (UK) {  // u rows of this warp into the u tile (the side ring is free), and out once per row tile
    float* us = reinterpret_cast<float*>(smem + kRingLora);
    const int q = lane & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 64 * wg + 16 * w + (lane >> 2) + 8 * h, k = 8 * j + 2 * q;
        *reinterpret_cast<float2*>(us + r * kLoraR + k) = make_float2(uacc[4 * j + 2 * h], uacc[4 * j + 2 * h + 1]);
        if (n0 == 0 && r < mlim && k < g.lr)
          *reinterpret_cast<float2*>(g.uo + (r0 + r) * g.lr + k) =
              make_float2(uacc[4 * j + 2 * h], uacc[4 * j + 2 * h + 1]);
      }
    __syncwarp();
  }
  if constexpr (LORA) {
    lora_epilogue(g, acc, reinterpret_cast<float*>(smem), r0, n0, mlim, nlim, 64 * wg + 16 * w, lane);
  } else {
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
  }
#else
  __trap();  // built without sm_90a: the launcher does not choose this kernel there
#endif
}

}  // namespace

bool grouped_gemm_wgmma_fits(const KernelPolicy& pol) { return pol.hopper() && pol.smem_fits(kSmem); }

bool grouped_gemm_wgmma_lora_fits(const KernelPolicy& pol, bool trans_w, int64_t N, int64_t K, const GroupedLora& l) {
  auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool uk = l.a != nullptr;  // u formed in the kernel: the forward form only
  const bool aligned = a16(l.l) && (uk ? a16(l.a) && a16(l.u_out) && trans_w : a16(l.u));
  return pol.hopper() && pol.smem_fits(kSmemLora) && aligned && l.r >= 1 && l.r <= kLoraR && l.r % 4 == 0 &&
         K % 8 == 0 && (trans_w ? true : N % 8 == 0);
}

cudaError_t launch_grouped_gemm_wgmma(const KernelPolicy& pol, const void* x, const void* w, bool trans_w,
                                      const int32_t* offsets, const int32_t* tile_off, int E, int64_t row_tiles,
                                      int64_t N, int64_t K, KOut y, float alpha, float beta, const GroupedLora* lora,
                                      cudaStream_t s) {
  if (!grouped_gemm_wgmma_fits(pol) || (trans_w ? K : N) % 8 != 0 || K % 8 != 0) return cudaErrorInvalidConfiguration;
  if (lora && !grouped_gemm_wgmma_lora_fits(pol, trans_w, N, K, *lora)) return cudaErrorInvalidConfiguration;
  const int64_t ntiles = (N + BN - 1) / BN;
  if (row_tiles > 0x7fffffff || ntiles > 65535) return cudaErrorInvalidValue;
  WgArgs a{static_cast<const bf16*>(x), static_cast<const bf16*>(w), offsets, tile_off, y, N, K, E, alpha, beta,
           lora ? lora->u : nullptr, lora ? lora->l : nullptr, lora ? static_cast<int>(lora->r) : 0,
           lora ? lora->scale : 0.f, lora ? static_cast<const bf16*>(lora->a) : nullptr,
           lora ? lora->u_out : nullptr};
  auto* kernel = lora && lora->a ? grouped_wgmma_kernel<true, true, true>
                 : lora ? (trans_w ? grouped_wgmma_kernel<true, true, false> : grouped_wgmma_kernel<false, true, false>)
                        : (trans_w ? grouped_wgmma_kernel<true, false, false> : grouped_wgmma_kernel<false, false, false>);
  const size_t smem = lora ? kSmemLora : kSmem;
  cudaError_t err = set_launch_smem(pol, kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(ntiles)), NT, smem, s>>>(a);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
