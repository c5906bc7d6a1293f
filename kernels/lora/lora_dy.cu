// The two products of a LoRA module's backward that read its output gradient dy [T, N] (B [N, r] the module's
// up factor, u = x·Aᵀ [T, r] from its forward):
//   du (=) alpha·dy·B     gB (+=) alpha·dyᵀ·u
// with dy read once (as two cuBLAS GEMMs each read all of dy: at r = 16 both are bound by that read).
// A block takes kBlockTok tokens x every splits-th chunk of 64 columns of dy (so that the blocks of a token block
// read one stretch of dy's rows side by side) and walks them in 64 x 64 tiles through a cp.async ring; warps 0-3
// form du for 16 tokens each (A = the dy tile, B = the B rows of the chunk), warps 4-7 gB for 16 columns each
// (A = the dy tile transposed by ldmatrix.trans, B = the u rows of the block).
// Each block writes F32 partial sums (du per column split, gB per token block) into a scratch buffer, and a
// second kernel adds them in a fixed order (no atomics: the same sums every run) and writes du (bf16) and gB.
// Portable kernels (mma.sync, cp.async, < 99 KiB of shared memory), the same under both kernel policies.
#include <cuda_bf16.h>

#include "common/device.cuh"
#include "common/mma.cuh"
#include "lora/lora.cuh"

namespace deltatune::kernels {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kTok = 64;                      // tokens per tile
constexpr int kCol = 64;                      // dy columns per tile
constexpr int kTokTiles = 4;                  // token tiles per block
constexpr int kBlockTok = kTok * kTokTiles;   // tokens per block
constexpr int kThreads = 256;                 // warps 0-3: du, 4-7: gB
constexpr int kLd = kCol + 8;                 // padded smem row of a dy tile (ldmatrix rows on distinct banks)

// cp.async ring depth: 4 tiles (32 KiB of dy) in flight per block (two blocks per SM at r = 16: 128 registers a
// thread, 72 KiB of shared memory a block). r = 32 (4 stages, one block per SM) was slower than cuBLAS at N = 6144
// (47 vs 36 us on an H200), so only r = 16 is launched.
template <int R> constexpr int kStages = R == 16 ? 5 : 4;
template <int R>
struct Smem {
  static constexpr int kLdR = R + 8;  // padded row of the B and u tiles
  bf16 dy[kStages<R>][kTok * kLd];
  bf16 b[kStages<R>][kCol * kLdR];
  bf16 u[kBlockTok * kLdR];
};

// Column splits and token blocks of one launch, and the partial-sum layout in the scratch:
// du_part [splits][T][r] then gB_part [token_blocks][N][r], F32.
struct Plan {
  int chunks_per_block = 1, splits = 1, token_blocks = 1;
  size_t du_floats = 0, gb_floats = 0;
};
Plan plan_for(const LoraDyArgs& a, int sm_count) {
  Plan p;
  const int64_t chunks = a.N / kCol;
  p.token_blocks = static_cast<int>((a.T + kBlockTok - 1) / kBlockTok);
  // Enough blocks for two per SM where the columns allow it, each taking whole 64-column chunks.
  const int64_t want = (2 * int64_t(sm_count) + p.token_blocks - 1) / p.token_blocks;
  const int64_t splits = want < chunks ? (want > 0 ? want : 1) : chunks;
  p.chunks_per_block = static_cast<int>((chunks + splits - 1) / splits);
  p.splits = static_cast<int>((chunks + p.chunks_per_block - 1) / p.chunks_per_block);
  p.du_floats = size_t(p.splits) * size_t(a.T) * size_t(a.r);
  p.gb_floats = size_t(p.token_blocks) * size_t(a.N) * size_t(a.r);
  return p;
}

template <int R>
__device__ __forceinline__ void load_stage(Smem<R>& sm, int buf, const bf16* dy, int64_t ldy, const bf16* B,
                                           int64_t t0, int64_t T, int64_t c0) {
  constexpr int kLdR = Smem<R>::kLdR;
  // dy tile: 64 rows x 8 pieces of 16 bytes; rows past T become zeros.
  for (int idx = threadIdx.x; idx < kTok * (kCol / 8); idx += kThreads) {
    const int r = idx / (kCol / 8), q = idx % (kCol / 8);
    const bool ok = t0 + r < T;
    mma::cp_async16(mma::smem_addr(&sm.dy[buf][r * kLd + 8 * q]), ok ? dy + (t0 + r) * ldy + c0 + 8 * q : dy, ok);
  }
  // B rows c0 .. c0 + 63.
  for (int idx = threadIdx.x; idx < kCol * (R / 8); idx += kThreads) {
    const int r = idx / (R / 8), q = idx % (R / 8);
    mma::cp_async16(mma::smem_addr(&sm.b[buf][r * kLdR + 8 * q]), B + (c0 + r) * R + 8 * q, true);
  }
}

template <int R>
__global__ void __launch_bounds__(kThreads)
    lora_dy_kernel(const bf16* __restrict__ dy, int64_t ldy, const bf16* __restrict__ B,
                   const bf16* __restrict__ u, int64_t ldu, int64_t T, int64_t N, float* __restrict__ du_part,
                   float* __restrict__ gb_part) {
  constexpr int kLdR = Smem<R>::kLdR;
  constexpr int NB = R / 8;  // n-blocks of 8
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<R>& sm = *reinterpret_cast<Smem<R>*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t tb = int64_t(blockIdx.y) * kBlockTok;
  // Chunk j of this block is blockIdx.x + j·splits: the blocks of a token block read side by side in dy's rows.
  const int64_t chunks_total = N / kCol, splits = gridDim.x;
  const int nc = static_cast<int>((chunks_total - blockIdx.x + splits - 1) / splits);
  auto chunk = [&](int j) { return int64_t(blockIdx.x) + j * splits; };
  const int nq = nc * kTokTiles;  // tiles of this block: chunk j = q / 4, token tile i = q % 4

  // u rows of the block (zeros past T), with the first stage.
  for (int idx = threadIdx.x; idx < kBlockTok * (R / 8); idx += kThreads) {
    const int r = idx / (R / 8), q = idx % (R / 8);
    const bool ok = tb + r < T;
    mma::cp_async16(mma::smem_addr(&sm.u[r * kLdR + 8 * q]), ok ? u + (tb + r) * ldu + 8 * q : u, ok);
  }
#pragma unroll
  for (int q = 0; q < kStages<R> - 1; ++q) {
    if (q < nq)
      load_stage<R>(sm, q, dy, ldy, B, tb + (q % kTokTiles) * kTok, T, chunk(q / kTokTiles) * kCol);
    mma::cp_async_commit();
  }

  float acc_du[kTokTiles][NB][4];  // warps 0-3: du of tokens 16·warp.. of each token tile
  float acc_gb[NB][4];             // warps 4-7: gB of columns 16·(warp−4).. of the current chunk
#pragma unroll
  for (int i = 0; i < kTokTiles; ++i)
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_du[i][n][e] = 0.f;
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_gb[n][e] = 0.f;

  for (int j = 0; j < nc; ++j) {
#pragma unroll
    for (int i = 0; i < kTokTiles; ++i) {
      const int q = j * kTokTiles + i, next = q + kStages<R> - 1;
      if (next < nq)
        load_stage<R>(sm, next % kStages<R>, dy, ldy, B, tb + (next % kTokTiles) * kTok, T,
                      chunk(next / kTokTiles) * kCol);
      mma::cp_async_commit();
      mma::cp_async_wait<kStages<R> - 1>();
      __syncthreads();
      const bf16* ds = sm.dy[q % kStages<R>];
      if (warp < 4) {  // du rows 16·warp .. of token tile i: dy tile rows · B rows of the chunk
        const bf16* bs = sm.b[q % kStages<R>];
#pragma unroll
        for (int kk = 0; kk < kCol / 16; ++kk) {
          uint32_t a[4];
          mma::ldsm_x4(a, mma::smem_addr(&ds[(16 * warp + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8]));
#pragma unroll
          for (int p = 0; p < NB / 2; ++p) {
            uint32_t b[4];
            mma::ldsm_x4_t(b, mma::smem_addr(&bs[(kk * 16 + (lane & 15)) * kLdR + p * 16 + (lane >> 4) * 8]));
            mma::mma16816(acc_du[i][2 * p], a, b[0], b[1]);
            mma::mma16816(acc_du[i][2 * p + 1], a, b[2], b[3]);
          }
        }
      } else {  // gB rows (dy columns) 16·(warp−4) .. of the chunk: dy tileᵀ · u rows of token tile i
        const int m0 = 16 * (warp - 4);
#pragma unroll
        for (int kk = 0; kk < kTok / 16; ++kk) {
          uint32_t a[4];
          mma::ldsm_x4_t(a, mma::smem_addr(&ds[(kk * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + m0 +
                                               ((lane >> 3) & 1) * 8]));
#pragma unroll
          for (int p = 0; p < NB / 2; ++p) {
            uint32_t b[4];
            mma::ldsm_x4_t(b, mma::smem_addr(&sm.u[(i * kTok + kk * 16 + (lane & 15)) * kLdR + p * 16 +
                                                   (lane >> 4) * 8]));
            mma::mma16816(acc_gb[2 * p], a, b[0], b[1]);
            mma::mma16816(acc_gb[2 * p + 1], a, b[2], b[3]);
          }
        }
        if (i == kTokTiles - 1) {  // the chunk's gB partial of this token block
          const int64_t col = chunk(j) * kCol + m0 + g;
          float* dst = gb_part + (int64_t(blockIdx.y) * N + col) * R;
#pragma unroll
          for (int n = 0; n < NB; ++n) {
            *reinterpret_cast<float2*>(dst + n * 8 + 2 * t4) = make_float2(acc_gb[n][0], acc_gb[n][1]);
            *reinterpret_cast<float2*>(dst + 8 * R + n * 8 + 2 * t4) = make_float2(acc_gb[n][2], acc_gb[n][3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_gb[n][e] = 0.f;
          }
        }
      }
      __syncthreads();  // the buffer of tile q is loaded again kStages − 1 tiles later
    }
  }
  mma::cp_async_wait<0>();
  if (warp < 4) {  // du partial of this column split
#pragma unroll
    for (int i = 0; i < kTokTiles; ++i) {
      const int64_t t = tb + i * kTok + 16 * warp + g;
      float* dst = du_part + (int64_t(blockIdx.x) * T + t) * R;
#pragma unroll
      for (int n = 0; n < NB; ++n) {
        if (t < T) *reinterpret_cast<float2*>(dst + n * 8 + 2 * t4) = make_float2(acc_du[i][n][0], acc_du[i][n][1]);
        if (t + 8 < T)
          *reinterpret_cast<float2*>(dst + 8 * R + n * 8 + 2 * t4) = make_float2(acc_du[i][n][2], acc_du[i][n][3]);
      }
    }
  }
}

// du[t, c] (=) bf16(alpha·Σ_s du_part[s, t, c]); gB[n, c] (+=) alpha·Σ_b gb_part[b, n, c]; sums in index order.
__global__ void lora_dy_reduce_kernel(const float* __restrict__ du_part, int splits,
                                      const float* __restrict__ gb_part, int token_blocks, int64_t T, int64_t N,
                                      int r, float alpha, bf16* __restrict__ du, int64_t lddu,
                                      float* __restrict__ gB) {
  const int64_t n_du = T * r, total = n_du + N * r;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx < n_du) {
      float s = 0.f;
      for (int k = 0; k < splits; ++k) s += du_part[k * n_du + idx];
      du[(idx / r) * lddu + idx % r] = __float2bfloat16_rn(alpha * s);
    } else {
      const int64_t e = idx - n_du, n_gb = N * r;
      float s = 0.f;
      for (int k = 0; k < token_blocks; ++k) s += gb_part[k * n_gb + e];
      gB[e] += alpha * s;
    }
  }
}

bool takes(const LoraDyArgs& a) {
  auto al16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.r == 16 && a.N > 0 && a.N % kCol == 0 && a.T > 0 && a.ldy % 8 == 0 &&
         a.ldu % 8 == 0 && al16(a.dy) && al16(a.B) && al16(a.u) && a.du != nullptr && a.gB != nullptr;
}

template <int R>
cudaError_t launch_r(const LoraDyArgs& a, const Plan& p, float* scratch, cudaStream_t s) {
  const size_t smem = sizeof(Smem<R>);
  // The opt-in above 48 KiB is per device: set at every launch (a host-side attribute, not a stream operation).
  const cudaError_t e =
      cudaFuncSetAttribute(lora_dy_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  float* du_part = scratch;
  float* gb_part = scratch + p.du_floats;
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.token_blocks));
  lora_dy_kernel<R><<<grid, kThreads, smem, s>>>(static_cast<const bf16*>(a.dy), a.ldy, static_cast<const bf16*>(a.B),
                                                 static_cast<const bf16*>(a.u), a.ldu, a.T, a.N, du_part, gb_part);
  const int64_t total = (a.T + a.N) * a.r;
  lora_dy_reduce_kernel<<<grid_for(total, 256), 256, 0, s>>>(du_part, p.splits, gb_part, p.token_blocks, a.T, a.N,
                                                             a.r, a.alpha, static_cast<bf16*>(a.du), a.lddu, a.gB);
  return cudaGetLastError();
}

}  // namespace

size_t lora_dy_scratch_bytes(const LoraDyArgs& a, const KernelPolicy& policy) {
  if (!takes(a)) return 0;
  const size_t smem = sizeof(Smem<16>);
  if (!policy.smem_fits(smem)) return 0;
  const Plan p = plan_for(a, policy.sm_count);
  return (p.du_floats + p.gb_floats) * sizeof(float);
}

cudaError_t launch_lora_dy(const LoraDyArgs& a, void* scratch, const KernelPolicy& policy, cudaStream_t s) {
  if (!takes(a) || scratch == nullptr) return cudaErrorInvalidValue;
  const Plan p = plan_for(a, policy.sm_count);
  float* f = static_cast<float*>(scratch);
  return launch_r<16>(a, p, f, s);
}

}  // namespace deltatune::kernels
