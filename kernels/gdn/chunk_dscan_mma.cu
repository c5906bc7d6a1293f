// Tensor-core (bf16 mma.sync, fp32 accumulators) version of the chunked GDN backward's reverse state scan
// (gdn_chunk_dscan_kernel, step 1 of chunk_bwd.cu), same contract: per (sequence, value head, tile of BV
// value columns), chunks in reverse, dh[ch] (=) dS at the chunk's end, then
//   dV' = Mᵀ·dO + diag(e^{G_last−G_i})·K̂·dS                         (64 x BV; dvn (=))
//   dS  ← Γ·dS + [Q̂ ; W]ᵀ·[diag(γ)·dO ; −dV']                       (128 x BV, one k = 128 product)
// Only dk = dv = 128 (gdn_chunk_mma_supported).
//
// Layout: 8 warps. dS (128 x BV, fp32) lives in registers in the mma accumulator layout, warp w owning
// state rows 16w..16w+15 (the output tile of its product in the dS update). Per chunk:
//   [a] dh (fp32, from the registers) and dS's bf16 copy (hi, and lo = dS − hi) into shared memory; barrier
//   [c] warp (wr, wc): dV' rows 16wr..+15, columns (BV/2)·wc..: K̂·(dS_hi + dS_lo) and Mᵀ·dO (k from the
//       diagonal: M is lower triangular), combined in fp32 with the row decay; dvn (fp32) to global and −dV'
//       (bf16 hi, plus lo) into the dS product's B tile; barrier
//   [e] dS = Γ·dS + [Q̂ ; W]ᵀ·[γ·dO ; −dV'_hi] + Wᵀ·(−dV'_lo), accumulated into the state registers.
// Two barriers per chunk. The next chunk's Q̂, W, K̂, M, dO and G are loaded into registers (float4, 122 per
// thread) when the chunk starts and written to the other of two bf16 operand buffers after [e], so their
// global latency overlaps the chunk's math; γ·dO and the decays e^{G_last−G_i}, Γ are made at that point
// (no exponential on the serial path). The chunk record after the next is read one chunk early.
//
// Precision: every product has fp32 accumulators and Γ·dS is applied in fp32. The fp32 operands dS (in
// K̂·dS) and dV' (in Wᵀ·dV') are split into bf16 hi + lo (two mma each): the state accumulates over the whole
// sequence. Q̂, W, K̂, M (fp32) are rounded to bf16 once; dO is exact when it arrives as bf16. Host-emulator
// nmse vs the FMA kernel (gdn/emu/gdn_emu.cpp, dscan_mma section): dh 5.7e-6..7.0e-6, dvn 2.5e-6..7.2e-6 over
// the five shapes; a 2048-token sequence with g ≥ −0.002 (32 chunks, slowest decay): dh 8.2e-6, dvn 9.4e-6
// (without the lo halves 1.0e-5 / 1.3e-5). The FMA backward fed these dh/dvn gives dg within 1.3e-5 (nmse)
// of the all-FMA dg: dh's rounding adds little to the bf16 rounding of the other kernels.
//
// Resources (nvcc 13, sm_90a, -O3, ptxas -v): BV 32: 229 registers, BV 16: 212 registers, no spills;
// shared memory 184,864 B (BV 32) / 160,288 B (BV 16) per block: one block (8 warps) per SM.
//
// Time estimate at T = 8192 (2 sequences), HK 16, HV 32 (BV 32: 256 blocks, two waves on 132 SMs of 64
// chunks each): every block reads its chunk's Q̂, W, K̂ (32 KiB each, fp32) and M (16 KiB) once per chunk,
// 116 KiB, so the kernel moves 256 · 64 · 116 KiB ≈ 1.9 GB from L2 (the four column tiles of a head read the
// same rows; HBM sees ≈ 0.35 GB). At 5-7 TB/s of L2 bandwidth that is 0.28-0.4 ms. The math per chunk is
// ≈ 1.5k cycles (per warp ~90 mma in dependent chains of 8 ([c]) and 12 ([e]), two barriers, the 58 KiB
// bf16 tile store), ≈ 0.9 µs, under the ≈ 2-2.8 µs per chunk that an SM's share of L2 bandwidth needs
// for its loads.
// Estimate: 0.35-0.45 ms (FMA kernel: 8.2 ms). If it measures compute-bound instead, the lo halves
// (kLoS, kLoV) are the first thing to drop (precision above); if L2-bound, a 4-block cluster per head
// sharing Q̂/W/K̂/M through distributed shared memory cuts the traffic 4x.
#include "common/device.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int DK = 128, DV = 128;  // the only supported head dims
constexpr int NT = 256;            // 8 warps
constexpr int LK = DK + 8;         // bf16 row stride of the Q̂, W, K̂ tiles
constexpr int LM = C + 8;          // of M

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;

// Shared memory: two operand buffers (chunk parity) and dS's bf16 copies.
template <int BV> struct DscanSmem {
  static constexpr int LB = BV + 8;                                  // row stride of the BV-column tiles
  static constexpr size_t qw = sizeof(bf16) * 2 * C * LK;            // [Q̂ ; W] [128][LK]
  static constexpr size_t kb = sizeof(bf16) * C * LK;                // K̂ [64][LK]
  static constexpr size_t mb = sizeof(bf16) * C * LM;                // M [64][LM] (row j, column i)
  static constexpr size_t dob = sizeof(bf16) * C * LB;               // dO [64][LB]
  static constexpr size_t bt = sizeof(bf16) * 3 * C * LB;            // [γ·dO ; −dV'_hi ; −dV'_lo] [192][LB]
  static constexpr size_t ex = sizeof(float) * (C + 4);              // e^{G_last−G_i} (0 past the end), Γ
  static constexpr size_t buf = qw + kb + mb + dob + bt + ex;
  static constexpr size_t ds = sizeof(bf16) * DK * LB;               // dS_hi, dS_lo [128][LB] each
  static constexpr size_t total = 2 * buf + 2 * ds;
  static_assert(qw % 16 == 0 && kb % 16 == 0 && mb % 16 == 0 && dob % 16 == 0 && bt % 16 == 0 && ex % 16 == 0 &&
                    ds % 16 == 0,
                "16-byte aligned sub-tiles (ldmatrix rows)");
};

struct Buf {
  bf16 *qw, *kb, *mb, *dob, *bt;
  float* ex;
};
template <int BV> __device__ __forceinline__ Buf buf_at(unsigned char* base, int b) {
  using S = DscanSmem<BV>;
  unsigned char* p = base + b * S::buf;
  Buf r;
  r.qw = reinterpret_cast<bf16*>(p);
  r.kb = reinterpret_cast<bf16*>(p + S::qw);
  r.mb = reinterpret_cast<bf16*>(p + S::qw + S::kb);
  r.dob = reinterpret_cast<bf16*>(p + S::qw + S::kb + S::mb);
  r.bt = reinterpret_cast<bf16*>(p + S::qw + S::kb + S::mb + S::dob);
  r.ex = reinterpret_cast<float*>(p + S::qw + S::kb + S::mb + S::dob + S::bt);
  return r;
}

// One chunk's operands in registers between their global load and their bf16 store: thread tid holds
// float4 column group (tid % 32) of rows tid/32 + 8r of Q̂, W, K̂ (r < 8), column group tid % 16 of M rows
// tid/16 + 16r (r < 4), BV/4 dO values of row tid/4, and G of that row and of the chunk's last row.
template <int BV> struct Pref {
  float4 q[8], w[8], k[8], m[4];
  float o[BV / 4];
  float gi, gl;
};

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(bf16* p, float4 x) {
  *reinterpret_cast<uint2*>(p) = make_uint2(mma::pack_bf16(x.x, x.y), mma::pack_bf16(x.z, x.w));
}

template <int BV>
__device__ __forceinline__ void load_chunk(Pref<BV>& P, ChunkRef cr, int ch, KIn dout, const float* qn, const float* kn,
                                           const float* W, const float* M, const float* Gc, int64_t HK, int64_t HV,
                                           int64_t h, int64_t hk, int c0) {
  const int tid = threadIdx.x;
  const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = (tid >> 5) + 8 * r, c = (tid & 31) * 4;
    const bool ok = row < cr.len;
    const int64_t t = cr.t0 + row;
    P.q[r] = ok ? ld4(qn + (t * HK + hk) * DK + c) : z;
    P.k[r] = ok ? ld4(kn + (t * HK + hk) * DK + c) : z;
    P.w[r] = ok ? ld4(W + (t * HV + h) * DK + c) : z;
  }
  // M is written for all 64 x 64 entries (zero above the diagonal and past the chunk's end).
  const float* Mi = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
#pragma unroll
  for (int r = 0; r < 4; ++r) P.m[r] = ld4(Mi + ((tid >> 4) + 16 * r) * C + (tid & 15) * 4);
  constexpr int E = BV / 4;
  const int row = tid >> 2;
  const bool ok = row < cr.len;
  const int64_t base = ((cr.t0 + row) * HV + h) * DV + c0 + (tid & 3) * E;
#pragma unroll
  for (int e = 0; e < E; ++e) P.o[e] = ok ? ld(dout, base + e) : 0.f;
  P.gi = ok ? Gc[(cr.t0 + row) * HV + h] : 0.f;
  P.gl = Gc[(cr.t0 + cr.len - 1) * HV + h];
}

template <int BV> __device__ __forceinline__ void store_chunk(const Pref<BV>& P, const Buf& B, int len) {
  constexpr int LB = BV + 8, E = BV / 4;
  const int tid = threadIdx.x;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = (tid >> 5) + 8 * r, c = (tid & 31) * 4;
    st4(B.qw + row * LK + c, P.q[r]);
    st4(B.qw + (C + row) * LK + c, P.w[r]);
    st4(B.kb + row * LK + c, P.k[r]);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) st4(B.mb + ((tid >> 4) + 16 * r) * LM + (tid & 15) * 4, P.m[r]);
  const int row = tid >> 2, c = (tid & 3) * E;
  const bool ok = row < len;
  const float gam_i = ok ? expf(P.gi) : 0.f;
#pragma unroll
  for (int e = 0; e < E; e += 2) {
    st_bf16x2(B.dob + row * LB + c + e, P.o[e], P.o[e + 1]);
    st_bf16x2(B.bt + row * LB + c + e, gam_i * P.o[e], gam_i * P.o[e + 1]);
  }
  if ((tid & 3) == 0) B.ex[row] = ok ? expf(P.gl - P.gi) : 0.f;
  if (tid == 0) B.ex[C] = expf(P.gl);
}

// kLoS / kLoV: the lo halves of dS (in K̂·dS) and of dV' (in Wᵀ·dV') take part (off only to measure what
// they buy, in the emulator).
template <int BV, bool kLoS = true, bool kLoV = true>
__global__ void __launch_bounds__(NT, 1) gdn_chunk_dscan_mma_kernel(
    KIn dout, const float* qn, const float* kn, const float* W, const float* M, const float* Gc, const int32_t* chunks,
    const int32_t* chunk_off, float* dh, float* dvn, int64_t HK, int64_t HV) {
  static_assert(BV == 16 || BV == 32, "column tiles of 16 or 32");
  constexpr int LB = BV + 8;
  constexpr int NB = BV / 8;     // n-blocks of the dS tile
  constexpr int CW = BV / 2;     // dV' columns per warp
  constexpr int NBC = CW / 8;    // their n-blocks (1 or 2)
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* dSh = reinterpret_cast<bf16*>(gdn_smem + 2 * DscanSmem<BV>::buf);  // [DK][LB]
  bf16* dSl = dSh + DK * LB;                                               // [DK][LB]
  const int n = blockIdx.x / HV, h = blockIdx.x % HV, c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int first = chunk_off[n], last = chunk_off[n + 1] - 1;
  if (last < first) return;

  float ds[NB][4];  // dS rows 16·warp + g (+8), columns 8·nb + 2·t4 (+1)
  zero(ds);
  Pref<BV> P;
  ChunkRef cur = chunk_at(chunks, last);
  load_chunk(P, cur, last, dout, qn, kn, W, M, Gc, HK, HV, h, hk, c0);
  store_chunk(P, buf_at<BV>(gdn_smem, 0), cur.len);
  ChunkRef nxt = last > first ? chunk_at(chunks, last - 1) : cur;
  int b = 0;
  for (int ch = last; ch >= first; --ch, b ^= 1) {
    const bool more = ch > first;
    // The next chunk's operands: in flight during this chunk's math. The record after it is read one
    // chunk early so the next iteration's addresses do not wait for it.
    if (more) load_chunk(P, nxt, ch - 1, dout, qn, kn, W, M, Gc, HK, HV, h, hk, c0);
    const ChunkRef nxt2 = ch - 1 > first ? chunk_at(chunks, ch - 2) : nxt;
    const Buf B = buf_at<BV>(gdn_smem, b);

    // [a] dh = dS at the chunk's end; its bf16 hi/lo copies for K̂·dS.
    {
      float* dh_out = dh + (static_cast<int64_t>(ch) * HV + h) * DK * DV + c0;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * warp + g + 8 * hf;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int c = 8 * nb + 2 * t4;
          const float x0 = ds[nb][2 * hf], x1 = ds[nb][2 * hf + 1];
          *reinterpret_cast<float2*>(dh_out + r * DV + c) = make_float2(x0, x1);
          const uint32_t hi = mma::pack_bf16(x0, x1);
          *reinterpret_cast<uint32_t*>(dSh + r * LB + c) = hi;
          const __nv_bfloat162 hv = *reinterpret_cast<const __nv_bfloat162*>(&hi);
          st_bf16x2(dSl + r * LB + c, x0 - __low2float(hv), x1 - __high2float(hv));
        }
      }
    }
    __syncthreads();  // dS copies and this chunk's operand buffer are complete

    // [c] dV' rows mc..mc+15, columns cw..cw+CW−1. The B fragments cover 16 columns from n0; with BV 16 a
    // warp uses the half `sel` of them.
    {
      const int mc = 16 * (warp & 3), cw = (warp >> 2) * CW, n0 = cw & ~15, sel = (cw >> 3) & 1;
      float ak[NBC][4], al[NBC][4], am[NBC][4];  // K̂·dS_hi, K̂·dS_lo (two chains), Mᵀ·dO
      zero(ak);
      zero(al);
      zero(am);
      auto mma_b = [&](float (&acc)[NBC][4], const uint32_t (&a)[4], const uint32_t (&bf)[4]) {
        if constexpr (NBC == 2) {
          mma::mma16816(acc[0], a, bf[0], bf[1]);
          mma::mma16816(acc[1], a, bf[2], bf[3]);
        } else {
          mma::mma16816(acc[0], a, sel ? bf[2] : bf[0], sel ? bf[3] : bf[1]);
        }
      };
#pragma unroll
      for (int k = 0; k < DK; k += 16) {
        uint32_t a[4], bh[4];
        frag_a(a, B.kb, LK, mc, k);
        frag_b_t(bh, dSh, LB, n0, k);
        mma_b(ak, a, bh);
        if constexpr (kLoS) {
          uint32_t bl[4];
          frag_b_t(bl, dSl, LB, n0, k);
          mma_b(al, a, bl);
        }
      }
      for (int k = mc; k < C; k += 16) {  // (Mᵀ)_ij = M_ji = 0 for j < i
        uint32_t a[4], bo[4];
        frag_a_t(a, B.mb, LM, mc, k);
        frag_b_t(bo, B.dob, LB, n0, k);
        mma_b(am, a, bo);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = mc + g + 8 * hf;
        const bool ok = i < cur.len;
        const float ri = B.ex[i];
#pragma unroll
        for (int nb = 0; nb < NBC; ++nb) {
          const int c = cw + 8 * nb + 2 * t4;
          const float x0 = ok ? am[nb][2 * hf] + ri * (ak[nb][2 * hf] + al[nb][2 * hf]) : 0.f;
          const float x1 = ok ? am[nb][2 * hf + 1] + ri * (ak[nb][2 * hf + 1] + al[nb][2 * hf + 1]) : 0.f;
          if (ok) *reinterpret_cast<float2*>(dvn + ((cur.t0 + i) * HV + h) * DV + c0 + c) = make_float2(x0, x1);
          const uint32_t hi = mma::pack_bf16(-x0, -x1);
          *reinterpret_cast<uint32_t*>(B.bt + (C + i) * LB + c) = hi;
          const __nv_bfloat162 hv = *reinterpret_cast<const __nv_bfloat162*>(&hi);
          st_bf16x2(B.bt + (2 * C + i) * LB + c, -x0 - __low2float(hv), -x1 - __high2float(hv));
        }
      }
    }
    __syncthreads();  // −dV' complete

    // [e] dS = Γ·dS + [Q̂ ; W]ᵀ·[γ·dO ; −dV'_hi] + Wᵀ·(−dV'_lo).
    {
      const float gam = B.ex[C];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) ds[nb][e] *= gam;
      const int m0 = 16 * warp;
#pragma unroll
      for (int k = 0; k < (kLoV ? 3 : 2) * C; k += 16) {
        uint32_t a[4];
        frag_a_t(a, B.qw, LK, m0, k < 2 * C ? k : k - C);  // k-rows 128.. pair W (again) with −dV'_lo
#pragma unroll
        for (int p = 0; p < NB / 2; ++p) {
          uint32_t bb[4];
          frag_b_t(bb, B.bt, LB, 16 * p, k);
          mma::mma16816(ds[2 * p], a, bb[0], bb[1]);
          mma::mma16816(ds[2 * p + 1], a, bb[2], bb[3]);
        }
      }
    }
    // The other buffer was last read before this chunk's first barrier.
    if (more) store_chunk(P, buf_at<BV>(gdn_smem, b ^ 1), nxt.len);
    cur = nxt;
    nxt = nxt2;
  }
}

}  // namespace

size_t gdn_chunk_dscan_mma_smem(int dk, int dv, int bv) {
  if (!(dk == DK && dv == DV)) return 0;
  return bv == 16 ? DscanSmem<16>::total : bv == 32 ? DscanSmem<32>::total : 0;
}

#ifndef DT_ATTN_EMU  // launcher: not part of the host emulation build (gdn/emu)
cudaError_t launch_gdn_chunk_dscan_mma(KIn dout, const float* qn, const float* kn, const float* W, const float* M,
                                       const float* Gc, const int32_t* chunks, const int32_t* chunk_off, int nseq,
                                       float* dh, float* dvn, int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s) {
  if (!gdn_chunk_mma_supported(dk, dv)) return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  const int bv = gdn_scan_tile_cols(nseq * HV, dv);
  auto* kern = bv == 16 ? gdn_chunk_dscan_mma_kernel<16> : gdn_chunk_dscan_mma_kernel<32>;
  const size_t smem = gdn_chunk_dscan_mma_smem(dk, dv, bv);
  if (smem == 0) return cudaErrorInvalidValue;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>(dv / bv));
  kern<<<grid, NT, smem, s>>>(dout, qn, kn, W, M, Gc, chunks, chunk_off, dh, dvn, HK, HV);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
