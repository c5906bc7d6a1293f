// Tensor-core (bf16 mma.sync, fp32 accumulators) version of the chunked GDN backward's reverse state scan
// (gdn_chunk_dscan_kernel, step 1 of chunk_bwd.cu), same contract with bf16 W, M in and dh, dvn out: per
// (sequence, value head, tile of BV value columns), chunks in reverse, dh[ch] (=) dS at the chunk's end, then
//   dV' = Mᵀ·dO + Kd·dS,   Kd = diag(e^{G_last−G_i})·K̂                  (64 x BV; dvn (=))
//   dS  ← Γ·dS + [Qg ; W]ᵀ·[dO ; −dV'],   Qg = diag(γ)·Q̂               (128 x BV, one k = 128 product)
// Only dk = dv = 128 (gdn_chunk_mma_supported).
//
// Layout: 8 warps, one block per SM. dS (128 x BV, fp32) lives in the mma accumulators, warp w holding a
// 32 x 32 tile (BV 64: 4 x 2 warps) or 16 rows x BV (BV 16/32). Per chunk:
//   [a] dS's bf16 copy into shared memory (it is also dh: bf16(dS)); the next chunk's Q̂, K̂ loads issued;
//       barrier
//   [c] dV' = Kd·dS + Mᵀ·dO (k from the diagonal: M is lower triangular), 32 x 16 per warp at BV 64;
//       −bf16(dV') into the B tile of [e]; dh written from the dS copy as 16-byte rows; barrier
//   [e] dS = Γ·dS + Qgᵀ·dO + Wᵀ·(−dV') into the accumulators; dvn written from the −dV' tile; the next
//       chunk's Q̂, K̂ (registers) converted, row factors applied, into its bf16 tiles.
// Two barriers per chunk. Operands are double-buffered by chunk parity: W, M, dO (bf16) arrive by cp.async one
// chunk ahead, G two and the chunk record three (so the loop's only register loads from global memory are
// Q̂/K̂: a consumer of another load would share their scoreboard and wait for them), Q̂, K̂ (fp32, 64
// registers) one chunk ahead. γ, e^{G_last−G_i} and Γ are made a chunk early (no exponential on the serial
// path) and folded into the Qg, Kd tiles.
//
// Column tile (dscan_mma_tile_cols): the smallest of 16, 32 whose grid (pairs · 128 / BV blocks) fits one
// wave of the SMs, else 64. One sequence of HV 16 / 32 (16 / 32 pairs): BV 16 / 32, 128 blocks; 2 sequences
// of HV 32: BV 64, 128 blocks in one wave (BV 32: 256 blocks, two waves of the whole chunk chain); more
// pairs: BV 64, the fewest waves and Q̂/K̂/W/M read once per 64 columns.
//
// Precision (host emulator vs the FMA kernel, gdn_emu dscan): fp32 accumulators, Γ·dS in fp32, bf16 operands
// (Q̂, K̂ rounded after their row factor; W, M, dO as given; dS and dV' rounded per chunk), bf16 outputs.
// The launcher leaves out the lo halves (bf16 of x − bf16(x)) of dS in Kd·dS and of dV' in Wᵀ·dV' (kLoS,
// kLoV): dh 5.6e-6..7.9e-6, dvn 5.0e-6..1.02e-5 over the check shapes (with both: dh ≤ 7.1e-6, dvn ≤ 8.0e-6;
// fp32 outputs before: dh 5.7e-6..7.0e-6, dvn 2.5e-6..7.2e-6; the bf16 rounding of dvn alone is ~2.5e-6).
// One 2048-token sequence with g ≥ −0.002 (32 chunks, slowest decay): dh 1.05e-5, dvn 1.39e-5 (with both
// halves 8.3e-6 / 1.01e-5, with either one alone ≤ 9.4e-6 / 1.31e-5). The lo halves cost 6% of the time.
// BV 16, 32, 64 and a dO passed as F32 give the same bits.
//
// Resources (nvcc 13, sm_90a, -O3, ptxas -v, the launcher's instances): BV 64 / 32 / 16: 197 / 172 / 166
// registers with fp32 Q̂, K̂ (180 / 154 / 146 with bf16 q, k and ρ: GdnQK, the backend's path for bf16 inputs,
// bit-identical results, 8K reverse scan 0.265 -> 0.25 ms), no spills; shared memory 170,560 / 150,080 /
// 139,840 B: one block (8 warps) per SM. The portable policy's one-set variant (kOneSet): 99,904 / 83,520 /
// 75,328 B, output bit-identical (emulator, every check shape and tile); 2b training step on the H200 with the
// portable policy 35,213 tok/s (35,253 with the two-set kernel, session 20).
//
// Time at T = 8192 (2 sequences of 4096), HK 16, HV 32 (BV 64, 128 blocks, 64 chunks each), H100: 0.267 ms
// (BV 32 as before: 256 blocks, two waves: 0.645 ms), 4.2 µs per chunk step. Per chunk and SM: 106 mma per
// warp (212 per scheduler, ~1.7k cycles of the tensor pipe), 64 ldmatrix.x4 per warp (~2k cycles of shared-
// memory bandwidth) plus ~1.5k more for the tile stores, cp.async fills and row copies: shared memory is the
// busiest unit (~50%), the rest is latency at the two barriers with 2 warps per scheduler. Each block reads
// 96 KiB per chunk (Q̂, K̂ fp32 64, W 16, M 8, dO 8; four blocks share a key head's Q̂/K̂ through L2), so a
// step moves ~12 MB from L2 and ~7 MB to/from HBM (dh 2 MB, dvn 1 MB written): ~1.7 TB/s, not the bound
// (ncu: DRAM 40%, L2 55% of peak).
// 1 sequence, HV 16 (BV 16): 0.176 ms (was 0.241); HV 32 (BV 32): 0.193 ms (was 0.309); 4 sequences of 4096,
// HV 32 (BV 64, two waves): 0.573 ms (was 1.47).
// Next: fewer shared-memory bytes per mma (wgmma reads its operands from shared memory; the host emulator
// has no model of it), and a cluster of the blocks that share a key head (4 here) exchanging Q̂/K̂ (W, M
// between the two column tiles of a head) through distributed shared memory: a fraction of the L2 reads.
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/l2norm_row.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int DK = 128, DV = 128;  // the only supported head dims
constexpr int NT = 256;            // 8 warps
constexpr int LK = DK + 8;         // bf16 row stride of the W, Qg, Kd tiles
constexpr int LM = C + 8;          // of M

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;

// Value columns per block: the smallest tile whose grid fits one wave of one block per SM (less work per
// serial chunk step), else 64 (the fewest waves, and Q̂/K̂/W/M read once per 64 columns instead of per 32).
int dscan_mma_tile_cols(int64_t pairs, int sms) {
  for (int bv = 16; bv <= 32; bv *= 2)
    if (pairs * (DV / bv) <= sms) return bv;
  return 64;
}

// Shared memory, byte offsets: two sets (chunk parity) of the chunk operands; G of two chunks and a ring of
// four chunk records, copied ahead (cp.async) so that the loop's only register loads from global memory are
// the Q̂/K̂ prefetch (an early consumer of any other load shares their scoreboard and waits for them too);
// one copy of dS (hi, and lo with kLoS) and of −dV' (hi, and lo with kLoV).
// kOneSet (the portable policy: at most 99 KiB per block): one set of the chunk operands, plus a second copy
// of its row factors f (written for the next chunk while [e] still reads this one's Γ); the next chunk's W, M,
// dO are copied and its Qg, Kd converted after [e], behind a third barrier, instead of during the chunk.
template <int BV, bool kLoS, bool kLoV, bool kOneSet = false> struct DscanSmem {
  static constexpr int LB = BV + 8;                            // row stride of the BV-column tiles
  static constexpr size_t w = 0;                               // W [C][LK] (cp.async)
  static constexpr size_t q = w + sizeof(bf16) * C * LK;       // Qg = bf16(γ_i·Q̂_i) [C][LK]
  static constexpr size_t k = q + sizeof(bf16) * C * LK;       // Kd = bf16(e^{G_last−G_i}·K̂_i) [C][LK]
  static constexpr size_t m = k + sizeof(bf16) * C * LK;       // M [C][LM] (row j, column i; cp.async)
  static constexpr size_t o = m + sizeof(bf16) * C * LM;       // dO [C][LB] (cp.async)
  static constexpr size_t f = o + sizeof(bf16) * C * LB;       // (γ_i, e^{G_last−G_i}) [C] (0 past the end), Γ
  static constexpr size_t set = f + sizeof(float) * (2 * C + 4);
  static constexpr size_t f1 = set;  // kOneSet: the odd chunks' f
  static constexpr size_t g = kOneSet ? f1 + (set - f) : 2 * set;  // G [2][C] (slot ch & 1; 0 past the end)
  static constexpr size_t rec = g + sizeof(float) * 2 * C;        // (t0, len) [4] (slot ch & 3)
  static constexpr size_t ds = rec + sizeof(int32_t) * 8;         // dS_hi (, dS_lo) [DK][LB]
  static constexpr size_t dv = ds + (kLoS ? 2 : 1) * sizeof(bf16) * DK * LB;  // −dV'_hi (, −dV'_lo) [C][LB]
  static constexpr size_t total = dv + (kLoV ? 2 : 1) * sizeof(bf16) * C * LB;
  static_assert(q % 16 == 0 && m % 16 == 0 && o % 16 == 0 && f % 16 == 0 && set % 16 == 0 && ds % 16 == 0 &&
                    dv % 16 == 0,
                "16-byte aligned tiles (cp.async, ldmatrix rows)");
};

struct Set {
  bf16 *w, *q, *k, *m, *o;
  float* f;
};
template <int BV, bool kOneSet> __device__ __forceinline__ Set set_at(unsigned char* base, int ch) {
  using S = DscanSmem<BV, false, false, kOneSet>;  // (the sets do not depend on the lo flags)
  unsigned char* p = base + (kOneSet ? 0 : (ch & 1) * S::set);
  float* f = reinterpret_cast<float*>(kOneSet && (ch & 1) ? base + S::f1 : p + S::f);
  return Set{reinterpret_cast<bf16*>(p + S::w), reinterpret_cast<bf16*>(p + S::q), reinterpret_cast<bf16*>(p + S::k),
             reinterpret_cast<bf16*>(p + S::m), reinterpret_cast<bf16*>(p + S::o), f};
}

// W, M and dO of chunk ch into set S: cp.async (zeros past the chunk's end), or, for a dO that is not bf16,
// loads converted to bf16 and stored (visible after the next barrier like the copies). img: W and M are the
// forward prep's operand images (GdnBwdBf16::image, gdn_scan_image_index; one contiguous tile per chunk and
// head), copied column group by column group into the same row-major tiles: the same bits as from rows.
template <int BV>
__device__ __forceinline__ void fill_async(const Set& S, ChunkRef cr, int ch, KIn dout, const bf16* W,
                                           const bf16* M, int64_t HV, int64_t h, int c0, bool img) {
  constexpr int LB = BV + 8, QO = BV / 8;  // 16-byte pieces per dO row
  const int tid = threadIdx.x;
  const int64_t rs = HV * DK;  // row stride of W and dO
  if (img) {                   // piece e of a tile: row e % 64 of column group e / 64, at e·8 in the image
    const bf16* wi = W + (static_cast<int64_t>(ch) * HV + h) * C * DK;
    const bf16* mi = M + (static_cast<int64_t>(ch) * HV + h) * C * C;
#pragma unroll
    for (int p = 0; p < C * 16 / NT; ++p) {
      const int e = tid + p * NT, r = e % C, c = (e / C) * 8;
      const bool ok = r < cr.len;
      mma::cp_async16(mma::smem_addr(S.w + r * LK + c), ok ? wi + 8 * e : W, ok);
    }
#pragma unroll
    for (int p = 0; p < C * 8 / NT; ++p) {
      const int e = tid + p * NT, r = e % C, c = (e / C) * 8;
      mma::cp_async16(mma::smem_addr(S.m + r * LM + c), mi + 8 * e, true);
    }
  } else {
    {
      const int r0 = tid >> 4, c = (tid & 15) * 8;
      const bf16* src = W + (cr.t0 + r0) * rs + h * DK + c;
#pragma unroll
      for (int p = 0; p < C * 16 / NT; ++p) {
        const int r = r0 + p * (NT / 16);
        const bool ok = r < cr.len;
        mma::cp_async16(mma::smem_addr(S.w + r * LK + c), ok ? src + p * (NT / 16) * rs : W, ok);
      }
    }
    {
      const int r0 = tid >> 3, c = (tid & 7) * 8;
      const bf16* src = M + (static_cast<int64_t>(ch) * HV + h) * C * C + r0 * C + c;  // all 64 rows written
#pragma unroll
      for (int p = 0; p < C * 8 / NT; ++p) {
        const int r = r0 + p * (NT / 8);
        mma::cp_async16(mma::smem_addr(S.m + r * LM + c), src + p * (NT / 8) * C, true);
      }
    }
  }
  const bf16* dob = static_cast<const bf16*>(dout.p);
  for (int idx = tid; idx < C * QO; idx += NT) {
    const int r = idx / QO, c = (idx % QO) * 8;
    const bool ok = r < cr.len;
    const int64_t at = (cr.t0 + r) * rs + h * DV + c0 + c;
    if (dout.t == KType::BF16) {
      mma::cp_async16(mma::smem_addr(S.o + r * LB + c), ok ? dob + at : dob, ok);
    } else {
      uint32_t v[4] = {0u, 0u, 0u, 0u};
      if (ok)
        for (int e = 0; e < 4; ++e) v[e] = mma::pack_bf16(ld(dout, at + 2 * e), ld(dout, at + 2 * e + 1));
      *reinterpret_cast<uint4*>(S.o + r * LB + c) = make_uint4(v[0], v[1], v[2], v[3]);
    }
  }
}

// Chunk ch's G into its slot, and its record into the ring.
__device__ __forceinline__ void copy_g(float* gs, ChunkRef cr, int ch, const float* Gc, int64_t HV, int64_t h) {
  const int i = threadIdx.x;
  if (i < C) {
    const bool ok = i < cr.len;
    mma::cp_async4(mma::smem_addr(gs + (ch & 1) * C + i), ok ? Gc + (cr.t0 + i) * HV + h : Gc, ok);
  }
}
__device__ __forceinline__ void copy_rec(int32_t* rec, const int32_t* chunks, int ch) {
  const int i = threadIdx.x;
  if (i < 2) mma::cp_async4(mma::smem_addr(rec + 2 * (ch & 3) + i), chunks + 2 * ch + i, true);
}
__device__ __forceinline__ ChunkRef rec_at(const int32_t* rec, int ch) {
  return ChunkRef{rec[2 * (ch & 3)], rec[2 * (ch & 3) + 1]};
}

// dst[r][0..COLS) = src[r][0..COLS) ^ flip (bf16 pairs; dst row stride ld) for r < rows, 16 bytes a thread:
// the outputs go out as whole rows instead of the mma layout's 4-byte pieces.
template <int ROWS, int COLS, uint32_t flip>
__device__ __forceinline__ void copy_rows(bf16* dst, int64_t ld, const bf16* src, int rows) {
  constexpr int Q = COLS / 8;
  static_assert(ROWS * Q % NT == 0 || ROWS * Q < NT, "16-byte pieces over the threads");
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * Q; idx += NT) {
    const int r = idx / Q, c = (idx % Q) * 8;
    if (r >= rows) continue;
    uint4 v = *reinterpret_cast<const uint4*>(src + r * (COLS + 8) + c);
    v.x ^= flip, v.y ^= flip, v.z ^= flip, v.w ^= flip;
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
}

// A chunk's Q̂ and K̂ in registers between their global load and their conversion: thread tid holds column
// group tid % 32 (4 values) of rows tid / 32 + 8r. R16: q, k before the L2 norm (4 bf16 each) and their ρ;
// else Q̂, K̂ themselves (fp32). Held raw: converting at the load would make it wait for the load.
template <bool R16>
struct QK {
  using Row = L2Row<R16>;
  Row q[8], k[8];
  float rq[8], rk[8];
};

// Rows past the chunk's end load its last row (a finite value that the row factor 0 then zeroes): no
// predicated loads, whose zero-initialised destinations would wait for the loads issued before them.
template <bool R16>
__device__ __forceinline__ void load_qk(QK<R16>& P, ChunkRef cr, const GdnQK& qk, int64_t HK, int64_t hk) {
  using Row = typename QK<R16>::Row;
  const int tid = threadIdx.x;
  const int64_t base = (cr.t0 * HK + hk) * DK + (tid & 31) * 4, rs = HK * DK;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int64_t row = min((tid >> 5) + 8 * r, cr.len - 1), at = base + row * rs;
    P.q[r] = ld_l2_row<Row>(qk.q.p, at);
    P.k[r] = ld_l2_row<Row>(qk.k.p, at);
    if (R16) {
      P.rq[r] = qk.rq[(cr.t0 + row) * HK + hk];
      P.rk[r] = qk.rk[(cr.t0 + row) * HK + hk];
    }
  }
}

// A chunk's row factors from its G slot into S.f (read by convert and [e] after the next barrier).
__device__ __forceinline__ void put_factors(const float* G, const Set& S, int len) {
  const int i = threadIdx.x;
  if (i < C) {
    const float gl = G[len - 1], gi = G[i];
    *reinterpret_cast<float2*>(S.f + 2 * i) = i < len ? make_float2(expf(gi), expf(gl - gi)) : make_float2(0.f, 0.f);
    if (i == 0) S.f[2 * C] = expf(gl);
  }
}

__device__ __forceinline__ void st4(bf16* p, float4 x, float s) {
  *reinterpret_cast<uint2*>(p) = make_uint2(mma::pack_bf16(s * x.x, s * x.y), mma::pack_bf16(s * x.z, s * x.w));
}

// Qg and Kd of P's chunk into S (its factors already in S.f).
template <bool R16>
__device__ __forceinline__ void convert(const QK<R16>& P, const Set& S, float scale) {
  const int tid = threadIdx.x, c = (tid & 31) * 4;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = (tid >> 5) + 8 * r;
    const float2 fr = *reinterpret_cast<const float2*>(S.f + 2 * row);
    st4(S.q + row * LK + c, l2_value(P.q[r], scale, P.rq[r]), fr.x);
    st4(S.k + row * LK + c, l2_value(P.k[r], 1.f, P.rk[r]), fr.y);
  }
}

// kLoS / kLoV: the lo halves of dS (in Kd·dS) and of dV' (in Wᵀ·dV') take part (the launcher's choice below).
template <int BV, bool kLoS, bool kLoV, bool R16, bool kOneSet>
__global__ void __launch_bounds__(NT, 1)
    gdn_chunk_dscan_mma_kernel(KIn dout, GdnQK qk, const bf16* W, const bf16* M, const float* Gc,
                               const int32_t* chunks, const int32_t* chunk_off, bf16* dh, bf16* dvn,
                               int64_t HK, int64_t HV, bool img) {
  static_assert(BV == 16 || BV == 32 || BV == 64, "column tiles of 16, 32 or 64");
  using L = DscanSmem<BV, kLoS, kLoV, kOneSet>;
  constexpr int LB = L::LB;
  // [c] dV' (C x BV): CWR x CWC warps, each CM m-tiles (16 rows) x CN columns (CNB n-blocks).
  constexpr int CM = BV == 64 ? 2 : 1, CWR = 4 / CM, CWC = 8 / CWR, CN = BV / CWC, CNB = CN / 8;
  // [e] dS (DK x BV): EWR x EWC warps, each EM m-tiles x EN columns (ENB n-blocks).
  constexpr int EWC = BV == 64 ? 2 : 1, EWR = 8 / EWC, EM = DK / 16 / EWR, EN = BV / EWC, ENB = EN / 8;
  static_assert(ENB % 2 == 0 && (CNB == 1 || CNB == 2), "n-blocks in pairs (ldmatrix x4)");
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* dSh = reinterpret_cast<bf16*>(gdn_smem + L::ds);
  bf16* dSl = dSh + DK * LB;
  bf16* dVh = reinterpret_cast<bf16*>(gdn_smem + L::dv);
  bf16* dVl = dVh + C * LB;
  float* gs = reinterpret_cast<float*>(gdn_smem + L::g);
  int32_t* rec = reinterpret_cast<int32_t*>(gdn_smem + L::rec);
  const int n = blockIdx.x / HV, h = blockIdx.x % HV, c0 = blockIdx.y * BV;
  const int64_t hk = h / (HV / HK);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int first = chunk_off[n], last = chunk_off[n + 1] - 1;
  if (last < first) return;
  const int mc = 16 * CM * (warp / CWC), cw = CN * (warp % CWC);  // [c] tile origin
  const int m0 = 16 * EM * (warp / EWC), n0 = EN * (warp % EWC);  // [e] tile origin (the dS rows/columns held)

  float ds[EM][ENB][4];  // dS rows m0 + 16·mt + g (+8), columns n0 + 8·nb + 2·t4 (+1)
#pragma unroll
  for (int mt = 0; mt < EM; ++mt) zero(ds[mt]);
  // The pipeline: chunk ch's record arrives (cp.async) three chunks ahead, its G two, its W, M, dO one (into
  // set ch & 1), its Q̂, K̂ one (registers, converted into set ch & 1 at the end of chunk ch + 1).
  QK<R16> P;
  for (int k = 0; k < 3 && last - k >= first; ++k) copy_rec(rec, chunks, last - k);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  ChunkRef cur = rec_at(rec, last);
  fill_async<BV>(set_at<BV, kOneSet>(gdn_smem, last), cur, last, dout, W, M, HV, h, c0, img);
  copy_g(gs, cur, last, Gc, HV, h);
  if (last > first) copy_g(gs, rec_at(rec, last - 1), last - 1, Gc, HV, h);
  mma::cp_async_commit();
  load_qk(P, cur, qk, HK, hk);
  mma::cp_async_wait<0>();
  __syncthreads();
  put_factors(gs + (last & 1) * C, set_at<BV, kOneSet>(gdn_smem, last), cur.len);
  __syncthreads();
  convert(P, set_at<BV, kOneSet>(gdn_smem, last), qk.scale);
  for (int ch = last; ch >= first; --ch) {
    const bool more = ch > first;
    const ChunkRef nxt = more ? rec_at(rec, ch - 1) : cur;
    const Set S = set_at<BV, kOneSet>(gdn_smem, ch), Sn = set_at<BV, kOneSet>(gdn_smem, ch - 1);

    // [a] dS's hi (= bf16(dh)) and lo copies for Kd·dS.
    {
#pragma unroll
      for (int mt = 0; mt < EM; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = m0 + 16 * mt + g + 8 * hf;
#pragma unroll
          for (int nb = 0; nb < ENB; ++nb) {
            const int c = n0 + 8 * nb + 2 * t4;
            const float x0 = ds[mt][nb][2 * hf], x1 = ds[mt][nb][2 * hf + 1];
            const uint32_t hi = mma::pack_bf16(x0, x1);
            *reinterpret_cast<uint32_t*>(dSh + r * LB + c) = hi;
            if constexpr (kLoS) {
              const __nv_bfloat162 hv = *reinterpret_cast<const __nv_bfloat162*>(&hi);
              st_bf16x2(dSl + r * LB + c, x0 - __low2float(hv), x1 - __high2float(hv));
            }
          }
        }
    }
    // The next chunk's Q̂, K̂: in flight during this chunk's math (issued after [a]'s stores, which the barrier
    // waits for).
    if (more) load_qk(P, nxt, qk, HK, hk);
    mma::cp_async_wait<0>();
    __syncthreads();  // dS copies and this chunk's set complete; everyone is done with the other set
    if (more && !kOneSet) fill_async<BV>(Sn, nxt, ch - 1, dout, W, M, HV, h, c0, img);
    if (ch - 2 >= first) copy_g(gs, rec_at(rec, ch - 2), ch - 2, Gc, HV, h);
    if (ch - 3 >= first) copy_rec(rec, chunks, ch - 3);
    mma::cp_async_commit();

    // [c] dV' rows mc.., columns cw..: Kd·(dS_hi (+ dS_lo)) + Mᵀ·dO (k from the diagonal: M is lower
    // triangular). The B fragments cover 16 columns from nc; with CN = 8 a warp uses the half `sel`.
    {
      const int nc = cw & ~15, sel = (cw >> 3) & 1;
      float a1[CM][CNB][4], a2[CM][CNB][4];  // Kd·dS_hi; Kd·dS_lo + Mᵀ·dO (two chains)
#pragma unroll
      for (int mt = 0; mt < CM; ++mt) {
        zero(a1[mt]);
        zero(a2[mt]);
      }
      auto mma_b = [&](float (&acc)[CNB][4], const uint32_t (&a)[4], const uint32_t (&bf)[4]) {
        if constexpr (CNB == 2) {
          mma::mma16816(acc[0], a, bf[0], bf[1]);
          mma::mma16816(acc[1], a, bf[2], bf[3]);
        } else {
          mma::mma16816(acc[0], a, sel ? bf[2] : bf[0], sel ? bf[3] : bf[1]);
        }
      };
#pragma unroll
      for (int k = 0; k < DK; k += 16) {
        uint32_t bh[4], bl[4];
        frag_b_t(bh, dSh, LB, nc, k);
        if constexpr (kLoS) frag_b_t(bl, dSl, LB, nc, k);
#pragma unroll
        for (int mt = 0; mt < CM; ++mt) {
          uint32_t a[4];
          frag_a(a, S.k, LK, mc + 16 * mt, k);
          mma_b(a1[mt], a, bh);
          if constexpr (kLoS) mma_b(a2[mt], a, bl);
        }
      }
      for (int k = mc; k < C; k += 16) {  // (Mᵀ)_ij = M_ji = 0 for j < i
        uint32_t bo[4];
        frag_b_t(bo, S.o, LB, nc, k);
#pragma unroll
        for (int mt = 0; mt < CM; ++mt) {
          if (k < mc + 16 * mt) continue;
          uint32_t a[4];
          frag_a_t(a, S.m, LM, mc + 16 * mt, k);
          mma_b(a2[mt], a, bo);
        }
      }
      // Rows past the chunk's end are 0 (Kd, M and dO are); dvn has no row there.
#pragma unroll
      for (int mt = 0; mt < CM; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = mc + 16 * mt + g + 8 * hf;
#pragma unroll
          for (int nb = 0; nb < CNB; ++nb) {
            const int c = cw + 8 * nb + 2 * t4;
            const float x0 = a1[mt][nb][2 * hf] + a2[mt][nb][2 * hf];
            const float x1 = a1[mt][nb][2 * hf + 1] + a2[mt][nb][2 * hf + 1];
            const uint32_t hi = mma::pack_bf16(x0, x1);
            *reinterpret_cast<uint32_t*>(dVh + i * LB + c) = hi ^ 0x80008000u;  // bf16(−x) = −bf16(x)
            if constexpr (kLoV) {
              const __nv_bfloat162 hv = *reinterpret_cast<const __nv_bfloat162*>(&hi);
              st_bf16x2(dVl + i * LB + c, __low2float(hv) - x0, __high2float(hv) - x1);
            }
          }
        }
    }
    copy_rows<DK, BV, 0u>(dh + (static_cast<int64_t>(ch) * HV + h) * DK * DV + c0, DV, dSh, DK);  // dh = bf16(dS)
    if (more) put_factors(gs + ((ch - 1) & 1) * C, Sn, nxt.len);
    __syncthreads();  // −dV' complete; the next chunk's factors visible

    // [e] dS = Γ·dS + Qgᵀ·dO + Wᵀ·(−dV'_hi (− dV'_lo)).
    {
      const float gam = S.f[2 * C];
#pragma unroll
      for (int mt = 0; mt < EM; ++mt)
#pragma unroll
        for (int nb = 0; nb < ENB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) ds[mt][nb][e] *= gam;
      // k-rows k..k+15 of Aᵀ·(B[0] + .. + B[nb−1]) (A stored [k][m]).
      auto step = [&](const bf16* A, bf16* const* B, int nb, int k) {
        uint32_t a[EM][4];
#pragma unroll
        for (int mt = 0; mt < EM; ++mt) frag_a_t(a[mt], A, LK, m0 + 16 * mt, k);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (j >= nb) break;
#pragma unroll
          for (int p = 0; p < ENB / 2; ++p) {
            uint32_t bb[4];
            frag_b_t(bb, B[j], LB, n0 + 16 * p, k);
#pragma unroll
            for (int mt = 0; mt < EM; ++mt) {
              mma::mma16816(ds[mt][2 * p], a[mt], bb[0], bb[1]);
              mma::mma16816(ds[mt][2 * p + 1], a[mt], bb[2], bb[3]);
            }
          }
        }
      };
      bf16* const dV[2] = {dVh, dVl};
#pragma unroll
      for (int k = 0; k < C; k += 16) step(S.q, &S.o, 1, k);
#pragma unroll
      for (int k = 0; k < C; k += 16) step(S.w, dV, kLoV ? 2 : 1, k);
    }
    copy_rows<C, BV, 0x80008000u>(dvn + (cur.t0 * HV + h) * DV + c0, HV * DV, dVh, cur.len);  // dvn = bf16(dV')
    if constexpr (kOneSet) {
      __syncthreads();  // everyone done with this chunk's operands: the next chunk's go into the same set
      if (more) fill_async<BV>(Sn, nxt, ch - 1, dout, W, M, HV, h, c0, img);
      mma::cp_async_commit();
    }
    // Into the other set (kOneSet: the same one, after the barrier above); the other set's last readers were
    // before this chunk's first barrier.
    if (more) convert(P, Sn, qk.scale);
    cur = nxt;
  }
}

constexpr bool kDscanLoS = false, kDscanLoV = false;  // see the header's precision numbers

}  // namespace

size_t gdn_chunk_dscan_mma_smem(int dk, int dv, int bv, bool one_set) {
  if (!(dk == DK && dv == DV)) return 0;
  if (one_set)
    return bv == 16 ? DscanSmem<16, kDscanLoS, kDscanLoV, true>::total
           : bv == 32 ? DscanSmem<32, kDscanLoS, kDscanLoV, true>::total
           : bv == 64 ? DscanSmem<64, kDscanLoS, kDscanLoV, true>::total
                      : 0;
  return bv == 16 ? DscanSmem<16, kDscanLoS, kDscanLoV>::total
         : bv == 32 ? DscanSmem<32, kDscanLoS, kDscanLoV>::total
         : bv == 64 ? DscanSmem<64, kDscanLoS, kDscanLoV>::total
                    : 0;
}

bool gdn_dscan_mma_one_set(const KernelPolicy& pol) { return !pol.hopper(); }

#ifndef DT_ATTN_EMU  // launcher: not part of the host emulation build (dev/emu/gdn)
namespace {
template <bool R16, bool kOneSet>
cudaError_t launch_dscan(KIn dout, const GdnQK& qk, const bf16* W16, const bf16* M16, const float* Gc,
                         const int32_t* chunks, const int32_t* chunk_off, int nseq, bf16* dh16, bf16* dvn16,
                         int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s, const KernelPolicy& pol,
                         bool img) {
  const int bv = dscan_mma_tile_cols(int64_t(nseq) * HV, pol.sm_count);
  auto* kern = bv == 16   ? gdn_chunk_dscan_mma_kernel<16, kDscanLoS, kDscanLoV, R16, kOneSet>
               : bv == 32 ? gdn_chunk_dscan_mma_kernel<32, kDscanLoS, kDscanLoV, R16, kOneSet>
                          : gdn_chunk_dscan_mma_kernel<64, kDscanLoS, kDscanLoV, R16, kOneSet>;
  const size_t smem = gdn_chunk_dscan_mma_smem(dk, dv, bv, kOneSet);
  cudaError_t e = set_launch_smem(pol, kern, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(nseq * HV), static_cast<unsigned>(dv / bv));
  kern<<<grid, NT, smem, s>>>(dout, qk, W16, M16, Gc, chunks, chunk_off, dh16, dvn16, HK, HV, img);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_gdn_chunk_dscan_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const void* W16,
                                       const void* M16, const float* Gc, const int32_t* chunks,
                                       const int32_t* chunk_off, int nseq, void* dh16, void* dvn16,
                                       int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s, bool img) {
  const int kind = gdn_qk_kind(qk);
  if (!gdn_chunk_mma_supported(dk, dv) || kind < 0) return cudaErrorInvalidValue;
  if (nseq == 0 || HV == 0) return cudaSuccess;
  const bool one = gdn_dscan_mma_one_set(pol);
  auto* run = kind == 1 ? (one ? launch_dscan<true, true> : launch_dscan<true, false>)
                        : (one ? launch_dscan<false, true> : launch_dscan<false, false>);
  return run(dout, qk, static_cast<const bf16*>(W16), static_cast<const bf16*>(M16), Gc, chunks, chunk_off,
             nseq, static_cast<bf16*>(dh16), static_cast<bf16*>(dvn16), HK, HV, dk, dv, s, pol, img);
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
