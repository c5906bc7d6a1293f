// Tensor-core (bf16 mma.sync, fp32 accumulators) WY backward of the chunked GDN backward (step 4 of
// chunk_bwd.cu's decomposition), same contract as gdn_chunk_wy_grad_kernel; T, dW and dV' come as the bf16
// scratch of the tensor-core path (gdn.cuh). One block per (chunk, value head), 8 warps. Phases 1-3 split
// each 64x64 product in 16x32 warp tiles (rows 16·(w%4), columns 32·(w/4)), phase 4 in 16 x dk/2 tiles:
//   1. dT = (dW·K̂ᵀ·diag(γ) + dU·Vᵀ)·diag(β) -> bf16 tile P; K̂ as a bf16 hi + lo pair in dW·K̂ᵀ. From the same
//      accumulators, the per-row dots Xw_i·K̂_i = Σ_m T_mi (dW·K̂ᵀ)_mi and Xu_i·V_i = Σ_m T_mi (dU·Vᵀ)_mi as
//      column sums over the tile's rows (so K̂ in fp32 and V are not needed again)
//   2. Y = dT·Tᵀ (T lower triangular: k stops at the tile's last column) -> bf16 tile Y
//   3. dÂ = −tril(Tᵀ·Y ⊙ e^{G_i−G_j}) in registers, diag(β)dÂ -> P; the warp forms the matching tile of
//      K̂K̂ᵀ and its partial row sums ra_i = Σ_{j<i} dÂ_ij (K̂K̂ᵀ)_ij and column sums ca_i = Σ_{j>i} β_j dÂ_ji
//      (K̂K̂ᵀ)_ji (the fp32 dÂ and K̂K̂ᵀ matrices are never stored; tiles above the diagonal are skipped)
//   4. Xw = Tᵀ·dW, dK̂ (+)= diag(βγ)Xw + diag(β)dÂ·K̂ + (diag(β)dÂ)ᵀ·K̂ (float2 read-modify-write, the reads
//      issued before phase 3), Xu = Tᵀ·dU, dv (=) diag(β)Xu (bf16x2 / float2 stores)
//   5. one warp: dβ, dG per row and their reverse cumsum within the chunk (xor-butterfly suffix scan).
// Cross-warp partials (ra, ca, the row dots) go through fixed shared-memory slots and are summed in a fixed
// order: no atomics, the results are bit-reproducible.
// Staging: dW and T (group 1), dV' and V (group 2, when V is bf16) by 16-byte cp.async, zero-filled past the
// chunk's end; K̂ through registers (fp32 k̂, or bf16 k before the norm and ρ: GdnQK, 124 registers either
// way), every load of a thread in flight before its first store; dW·K̂ᵀ
// runs while group 2 lands. T16, dW16, dvn16 (and a bf16 v, else it is converted) 16-byte aligned.
// Shared memory (dk = dv = 128): K̂, dW, V, dU as bf16 64x136, T, P, Y as bf16 64x72 (K̂'s lo half lives over
// P and Y until phase 1 is done), 16 fp32 row vectors (ρ_k over ra; ca without the two 16x32 tiles above the
// diagonal, which are zero; dg in read again from global memory in phase 5): 101,376 B = 99 KiB, the portable
// policy's limit (was 102,144 B).
// Resources (ptxas -v, sm_90a, CUDA 13.0): 116 registers (R16: 111; 114 / 109 before the 99 KiB layout, 126
// before the dk̂ partial sums were held as bf16 pairs), 0 bytes spilled, __launch_bounds__(256, 2): 2 blocks
// (16 warps) per SM, limited by shared memory (3 blocks would need ≤ 85 registers).
// Precision: the bf16 operands are those the fp32-staging version rounded, except that K̂ enters dW·K̂ᵀ (and
// so dT) and the Xw·K̂ dots as hi + lo (~16 significant bits, as good as fp32 here), or for bf16 k (R16) as
// dW·kᵀ·diag(ρ_k) with k itself in the lo tile's place (exact products, one mma pass instead of two); dÂ, ra,
// ca, the dots and dg stay fp32. Emulator, on the FMA WY kernel's inputs: nmse dk̂ ≤ 5e-7, dg ≤ 5e-8, dβ ≤
// 4e-6, dv ≤ 6e-6 (bf16 dv), the same as the fp32-staging version. Time at T = 8192 (2 x 4096), HK 16, HV 32
// (4096 blocks, 15.5 per SM slot): DRAM traffic is ~0.64 GB per launch (reads: 128 MB dk̂ (64 MB since its
// partial sums come in bf16), 64 MB K̂, 64 MB each dW, dV', V, 32 MB T; writes: 64 MB dk̂ (the final sum in
// bf16: only the L2 backward reads it; 128 MB as fp32 before session 6), 64 MB dv), i.e. ~0.21 ms at ~3 TB/s;
// the ~1.7k mma per block (~1.5 us per block at 2 blocks per SM) overlap only partly, since the co-resident
// blocks tend to stage together. Measured with a standalone harness on an H100 SXM (bf16 v/dv): 0.31 ms
// (was 1.20 ms with synchronous fp32 staging at 1 block per SM); ~34k cycles per block, a third of it the
// staging's wait for DRAM, the rest mostly phases 3-4 (the dk̂ read-modify-write).
#include "common/device.cuh"
#include "common/launch_smem.cuh"
#include "gdn/chunk_util.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"
#include "gdn/gdn_mma.cuh"
#include "gdn/l2norm_row.cuh"

namespace deltatune::kernels {
namespace {

using namespace gdn_mma;
constexpr int C = kGdnChunk;
constexpr int NT = 256;  // 8 warps

using gdn_chunk::chunk_at;
using gdn_chunk::ChunkRef;

// Rows [0, C) x COLS of K̂ (row r at base + r·stride; zeros for r ≥ rows_ok) as 4-value pieces x[k] = piece
// threadIdx.x + k·NT of the row-major tile: k̂ itself (F32, Row float4) or k before the norm (BF16, Row uint2)
// with its row's ρ_k in rho[k] (GdnQK). store_bf16_rows writes K̂ to hi[r][LD] and lo[r][LD] as the bf16 pair
// bf16(x), bf16(x − bf16(x)) (see split_bf16x2).
template <int COLS, class Row, int N>
__device__ __forceinline__ void load_k_rows(Row (&x)[N], float (&rho)[N], const GdnQK& qk, int64_t base,
                                            int64_t stride, int64_t rbase, int64_t rstride, int rows_ok) {
  constexpr int Q = COLS / 4;
  static_assert(C * Q == N * NT, "4-value pieces split evenly over the threads");
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    x[k] = r < rows_ok ? ld_l2_row<Row>(qk.k.p, base + r * stride + c) : Row{};
    rho[k] = !std::is_same_v<Row, uint2> ? 1.f : r < rows_ok ? qk.rk[rbase + r * rstride] : 0.f;
  }
}
// With k before the norm (Row uint2), lo gets k itself (exact in bf16) and rho_row[r] its row's ρ_k instead.
template <int COLS, int LD, class Row, int N>
__device__ __forceinline__ void store_bf16_rows(bf16* hi, bf16* lo, const Row (&raw)[N],
                                                const float (&rho)[N], float* rho_row) {
  constexpr int Q = COLS / 4;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int idx = threadIdx.x + k * NT, r = idx / Q, c = (idx % Q) * 4;
    const float4 x = l2_value(raw[k], 1.f, rho[k]);  // K̂ exactly as the prep forms it
    uint32_t h0, h1, l0, l1;
    split_bf16x2(h0, l0, x.x, x.y);
    split_bf16x2(h1, l1, x.z, x.w);
    *reinterpret_cast<uint2*>(hi + r * LD + c) = make_uint2(h0, h1);
    if constexpr (std::is_same_v<Row, uint2>) {
      *reinterpret_cast<uint2*>(lo + r * LD + c) = raw[k];
      if (idx % Q == 0) rho_row[r] = rho[k];
    } else {
      *reinterpret_cast<uint2*>(lo + r * LD + c) = make_uint2(l0, l1);
    }
  }
}

// dst[r][c] (bf16) = src[base + r·stride + c] for r < rows_ok, else 0 (any storage type, converted).
template <int COLS>
__device__ __forceinline__ void stage_kin(bf16* dst, int ld_, KIn src, int64_t base, int64_t stride,
                                          int rows_ok) {
  constexpr int P = COLS / 2;
  for (int idx = threadIdx.x; idx < C * P; idx += NT) {
    const int r = idx / P, c = (idx % P) * 2;
    float lo = 0.f, hi = 0.f;
    if (r < rows_ok) {
      lo = ld(src, base + r * stride + c);
      hi = ld(src, base + r * stride + c + 1);
    }
    st_bf16x2(dst + r * ld_ + c, lo, hi);
  }
}

__device__ __forceinline__ float2 ld_bf16x2(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t w) {
  return make_float2(__bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w & 0xffffu))),
                     __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w >> 16))));
}

// Sums of v[c] over the 8 lanes of an mma column (lanes t, t+4, .., t+28) for c < 8, by halving exchanges
// (4 + 2 + 1 shuffles): v[0] ends up with the sum for c = 4·(g&1) + 2·((g>>1)&1) + (g>>2), g = lane / 4.
// Returns that column's offset 8·(c/2) + 2·t + c%2 in a 32-column warp tile when v[2·nb + e] held column
// 8·nb + 2·t + e.
__device__ __forceinline__ int column_sums8(float (&v)[8]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0, h = 4; s < 3; ++s, h >>= 1) {
    const bool up = lane & (4 << s);  // this lane keeps the upper half v[h..2h)
#pragma unroll
    for (int k = 0; k < h; ++k) {
      const float keep = up ? v[k + h] : v[k], give = up ? v[k] : v[k + h];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, give, 4 << s);
    }
  }
  const int g = lane >> 2, c = 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
  return 8 * (c >> 1) + 2 * (lane & 3) + (c & 1);
}

// dst[column offset] = the column sums of v (column_sums8), each stored by one lane.
__device__ __forceinline__ void store_column_sums(float* dst, float (&v)[8]) {
  const int c = column_sums8(v);
  dst[c] = v[0];
}

// p[2·nb + e] += Σ_hf T[m0 + g + 8·hf][n0 + 8·nb + 2·t + e]·x[nb][2·hf + e] for a 16x32 accumulator tile x
// (T bf16, row stride ld).
__device__ __forceinline__ void add_t_weighted(float (&p)[8], const float (&x)[4][4], const bf16* T, int ld,
                                               int m0, int n0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int nb = 0; nb < 4; ++nb)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float2 t = ld_bf16x2(T + (m0 + g + 8 * hf) * ld + n0 + 8 * nb + 2 * t4);
      p[2 * nb] += t.x * x[nb][2 * hf];
      p[2 * nb + 1] += t.y * x[nb][2 * hf + 1];
    }
}

// ---- 4. WY backward -------------------------------------------------------------------------------------
constexpr int kRowVecs = 16;  // fp32 [C] vectors: G, β, γ, ra[2] (ρ_k over ra[0]), ca[3], xw[4], xu[4]
// ca's slot of the 32 columns from n0 of row tile rt's column sums: rt 0-3 for columns 0-31, rt 2-3 for
// columns 32-63 (rt 0-1 have none there: their tiles lie above the diagonal).
__device__ __forceinline__ int ca_slot(int rt, int n0) { return n0 == 0 ? 32 * rt : 128 + 32 * (rt - 2); }

template <int DK, int DV> constexpr size_t wy_grad_mma_smem() {
  return sizeof(bf16) * (2 * size_t(C) * (DK + 8) + 2 * size_t(C) * (DV + 8) + 3 * size_t(C) * (C + 8)) +
         sizeof(float) * kRowVecs * C;
}

// R16: k before the norm (BF16) with ρ_k (GdnQK); else k̂ (F32).
template <int DK, int DV, bool R16>
__global__ void __launch_bounds__(NT, 2)
    gdn_chunk_wy_grad_mma_kernel(GdnQK qk, KIn v, GdnGates gates, const float* Gc, const int32_t* chunks,
                                 const bf16* T16, const bf16* dW16, const bf16* dvn16, const bf16* dkh,
                                 bf16* dkh16, KOut dv_out, GdnGateGrads gr, int64_t HK, int64_t HV) {
  static_assert(DK == DV && DK % 32 == 0, "one warp tile shape serves the key and value products");
  constexpr int LK = DK + 8, LV = DV + 8, LC = C + 8, NH = DK / 16;  // NH: n-blocks of a dk/2-wide tile
  extern __shared__ __align__(16) unsigned char gdn_smem[];
  bf16* Kb = reinterpret_cast<bf16*>(gdn_smem);  // [C][LK] K̂ (bf16(K̂), the hi half)
  bf16* dWb = Kb + C * LK;                        // [C][LK] dW
  bf16* Vb = dWb + C * LK;                        // [C][LV] V
  bf16* dUb = Vb + C * LV;                        // [C][LV] dU = dV'
  bf16* Tb = dUb + C * LV;                        // [C][LC] T = (I + A)^{-1}
  bf16* Pb = Tb + C * LC;                         // [C][LC] dT, then diag(β)·dÂ
  bf16* Yb = Pb + C * LC;                         // [C][LC] Y = dT·Tᵀ
  bf16* Klo = Pb;  // [C][LK] K̂ − bf16(K̂) (the lo half), or (R16) k itself; over P and Y until dW·K̂ᵀ is done
  static_assert(LK <= 2 * LC, "K̂'s lo half fits in P and Y");
  float* G = reinterpret_cast<float*>(Yb + C * LC);  // [C] G_i (chunk-local cumsum)
  float* B = G + C;                                  // [C] β
  float* Gam = B + C;                                // [C] γ = e^G
  float* ra = Gam + C;                               // [2][C] ra per column half of dÂ (from phase 3)
  float* Rk = ra;                                    // [C] ρ_k (R16; read last in phase 1)
  float* ca = ra + 2 * C;                            // [3][C] ca per row tile of dÂ (ca_slot)
  float* xwk = ca + 3 * C;                           // [4][C] Xw·K̂ per row tile of T (see phase 1)
  float* xuv = xwk + 4 * C;                          // [4][C] Xu·V likewise
  const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const ChunkRef cr = chunk_at(chunks, ch);
  const int64_t hk = h / (HV / HK);
  const bool v16 = v.t == KType::BF16 && (reinterpret_cast<uintptr_t>(v.p) & 15) == 0;

  cp_rows<C, DK, LK, NT>(dWb, dW16 + (cr.t0 * HV + h) * DK, HV * DK, cr.len);
  // All 64 rows of T are valid: the prep stores identity rows/columns past the chunk's end.
  cp_rows<C, C, LC, NT>(Tb, T16 + (static_cast<int64_t>(ch) * HV + h) * C * C, C, C);
  mma::cp_async_commit();
  // K̂'s rows (4 values per thread and row), stored as bf16 hi + lo once every load of the thread is in flight
  constexpr int KR = C * DK / 4 / NT;
  L2Row<R16> kx[KR];
  float rho[KR];
  load_k_rows<DK>(kx, rho, qk, (cr.t0 * HK + hk) * DK, HK * DK, cr.t0 * HK + hk, HK, cr.len);
  cp_rows<C, DV, LV, NT>(dUb, dvn16 + (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  if (v16) cp_rows<C, DV, LV, NT>(Vb, static_cast<const bf16*>(v.p) + (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  mma::cp_async_commit();
  float gi = 0.f, bi = 0.f;
  if (tid < cr.len) {
    const int64_t o = (cr.t0 + tid) * HV + h;
    gi = Gc[o];
    bi = gdn_beta_at(gates, o);
  }
  store_bf16_rows<DK, LK>(Kb, Klo, kx, rho, Rk);
  if (!v16) stage_kin<DV>(Vb, LV, v, (cr.t0 * HV + h) * DV, HV * DV, cr.len);
  if (tid < C) {
    G[tid] = gi;
    Gam[tid] = expf(gi);
    B[tid] = bi;
  }
  mma::cp_async_wait<1>();
  __syncthreads();

  // Phases 1-3 work on 16x32 tiles of the 64x64 products (rows m0.., columns n0..).
  const int rt = warp & 3, wc = warp >> 2, m0 = 16 * rt, n0 = 32 * wc;
  // The row dot products Xw_i·K̂_i = Σ_m T_mi (dW_m·K̂_i) and Xu_i·V_i = Σ_m T_mi (dU_m·V_i) are column sums of
  // T ⊙ (dW·K̂ᵀ) and T ⊙ (dU·Vᵀ) over this tile's rows (V exact in bf16, else Xu·V is formed from fp32 V in
  // phase 4).
  {
    // 1. dT = (dW·K̂ᵀ·diag(γ) + dU·Vᵀ)·diag(β), K̂ as bf16 hi + lo (dW·K̂ᵀ as accurate as with fp32 K̂): dW·K̂ᵀ
    // with the first group, dU·Vᵀ once the second landed.
    float a[4][4], b[4][4];
    zero(a);
    if (R16) {  // dW·K̂ᵀ = dW·kᵀ·diag(ρ_k): k exact in bf16 (the lo tile holds it), one product
      warp_mma<4, false, false>(a, dWb, LK, m0, Klo, LK, n0, 0, DK);
#pragma unroll
      for (int nb = 0; nb < 4; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) a[nb][e] *= Rk[n0 + 8 * nb + 2 * t4 + (e & 1)];
    } else {
      warp_mma_split<4, false, false, false, true>(a, dWb, nullptr, LK, m0, Kb, Klo, LK, n0, 0, DK);
    }
    {
      float xw[8] = {};
      add_t_weighted(xw, a, Tb, LC, m0, n0);
      store_column_sums(xwk + rt * C + n0, xw);
    }
    mma::cp_async_wait<0>();
    __syncthreads();  // also: K̂'s lo half is read by no one any more
    zero(b);
    warp_mma<4, false, false>(b, dUb, LV, m0, Vb, LV, n0, 0, DV);
    if (v16) {
      float xu[8] = {};
      add_t_weighted(xu, b, Tb, LC, m0, n0);
      store_column_sums(xuv + rt * C + n0, xu);
    }
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int j = n0 + 8 * nb + 2 * t4;
      float x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = B[j + (e & 1)] * (Gam[j + (e & 1)] * a[nb][e] + b[nb][e]);
      st_bf16x2(Pb + (m0 + g) * LC + j, x[0], x[1]);
      st_bf16x2(Pb + (m0 + g + 8) * LC + j, x[2], x[3]);
    }
  }
  __syncthreads();
  {
    // 2. Y = dT·Tᵀ: T_jm = 0 for m > j, so k stops at the tile's last column.
    float y[4][4];
    zero(y);
    warp_mma<4, false, false>(y, Pb, LC, m0, Tb, LC, n0, 0, n0 + 32);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int j = n0 + 8 * nb + 2 * t4;
      st_bf16x2(Yb + (m0 + g) * LC + j, y[nb][0], y[nb][1]);
      st_bf16x2(Yb + (m0 + g + 8) * LC + j, y[nb][2], y[nb][3]);
    }
  }
  __syncthreads();  // Y complete; every read of dT is done, so P takes diag(β)·dÂ
  // Phase 4's warp tile: rows m0.. x columns (dk/2)·wc..; its dK̂ is loaded here, in flight during 3.
  const int n4 = (DK / 2) * wc;
  bool ok[2];
  int64_t tr[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    ok[hf] = m0 + g + 8 * hf < cr.len;
    tr[hf] = cr.t0 + m0 + g + 8 * hf;
  }
  uint32_t df[2][NH];  // bf16 pairs, widened where they are added (half the registers of float2)
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int nb = 0; nb < NH; ++nb)
      df[hf][nb] =
          ok[hf] ? *reinterpret_cast<const uint32_t*>(dkh + (tr[hf] * HV + h) * DK + n4 + 8 * nb + 2 * t4)
                 : 0u;
  {
    // 3. dÂ = −(Tᵀ·Y) ⊙ e^{G_i−G_j} for j < i < len (T_mi = 0 for m < i: k starts at the tile), with the
    // matching K̂K̂ᵀ tile for ra and ca. Tiles wholly above the diagonal (n0 ≥ m0 + 16) are zero.
    float da[4][4], kk[4][4];
    zero(da);
    zero(kk);
    if (n0 < m0 + 16) {
      warp_mma<4, true, true>(da, Tb, LC, m0, Yb, LC, n0, m0, C);
      warp_mma<4, false, false>(kk, Kb, LK, m0, Kb, LK, n0, 0, DK);
    }
    float rs[2] = {0.f, 0.f}, cs[8];  // cs[2·nb + e]: column n0 + 8·nb + 2·t4 + e
#pragma unroll
    for (int nb = 0; nb < 4; ++nb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = n0 + 8 * nb + 2 * t4 + e;
        float x[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = m0 + g + 8 * hf;
          x[hf] = (i > j && i < cr.len) ? -da[nb][2 * hf + e] * expf(G[i] - G[j]) : 0.f;
          da[nb][2 * hf + e] = B[i] * x[hf];
          x[hf] *= kk[nb][2 * hf + e];
          rs[hf] += x[hf];
        }
        cs[2 * nb + e] = da[nb][e] * kk[nb][e] + da[nb][2 + e] * kk[nb][2 + e];
      }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float r = gdn_chunk::quad_sum(rs[hf]);
      if (t4 == 0) ra[wc * C + m0 + g + 8 * hf] = r;
    }
    if (n0 < m0 + 16) store_column_sums(ca + ca_slot(rt, n0), cs);  // warp-uniform (shuffles inside)
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int j = n0 + 8 * nb + 2 * t4;
      st_bf16x2(Pb + (m0 + g) * LC + j, da[nb][0], da[nb][1]);
      st_bf16x2(Pb + (m0 + g + 8) * LC + j, da[nb][2], da[nb][3]);
    }
  }
  __syncthreads();
  {
    // 4. Xw = Tᵀ·dW, dK̂ (+)= diag(βγ)Xw + diag(β)dÂ·K̂ + (diag(β)dÂ)ᵀ·K̂ (row i of diag(β)dÂ is zero past the
    // diagonal: k < m0 + 16 for the first), then Xu = Tᵀ·dU and dv. Rows past the chunk's end stay unread and
    // unwritten in global memory.
    float acc[NH][4];
    zero(acc);
    warp_mma<NH, true, true>(acc, Tb, LC, m0, dWb, LK, n4, m0, C);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      const float bg = B[i] * Gam[i];
#pragma unroll
      for (int nb = 0; nb < NH; ++nb) {
        acc[nb][2 * hf] *= bg;
        acc[nb][2 * hf + 1] *= bg;
      }
    }
    warp_mma<NH, false, true>(acc, Pb, LC, m0, Kb, LK, n4, 0, m0 + 16);
    warp_mma<NH, true, true>(acc, Pb, LC, m0, Kb, LK, n4, m0, C);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      if (ok[hf])
#pragma unroll
        for (int nb = 0; nb < NH; ++nb) {
          const float2 p = unpack_bf16x2(df[hf][nb]);
          st_bf16x2(dkh16 + (tr[hf] * HV + h) * DK + n4 + 8 * nb + 2 * t4, p.x + acc[nb][2 * hf],
                    p.y + acc[nb][2 * hf + 1]);
        }
    zero(acc);
    warp_mma<NH, true, true>(acc, Tb, LC, m0, dUb, LV, n4, m0, C);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = m0 + g + 8 * hf;
      const float bi = B[i];
      const int64_t vo = (tr[hf] * HV + h) * DV + n4 + 2 * t4;
      float s = 0.f;
      if (ok[hf])
#pragma unroll
        for (int nb = 0; nb < NH; ++nb) {
          const float u0 = acc[nb][2 * hf], u1 = acc[nb][2 * hf + 1];
          if (!v16) s += u0 * ld(v, vo + 8 * nb) + u1 * ld(v, vo + 8 * nb + 1);
          st_pair(dv_out, vo + 8 * nb, bi * u0, bi * u1);
        }
      if (!v16) {  // the row sums of Xu ⊙ V per column half in place of phase 1's per row tile
        s = gdn_chunk::quad_sum(s);
        if (t4 == 0) {
          xuv[wc * C + i] = s;
          xuv[(2 + wc) * C + i] = 0.f;
        }
      }
    }
  }
  __syncthreads();
  if (warp == 0) {
    // 5. Row i = 2·lane + r: dβ, dG_i, then dg_i (=) Σ_{m ≥ i} dG_m within the chunk.
    float d[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * lane + r;
      d[r] = 0.f;
      if (i < cr.len) {
        const int64_t o = (cr.t0 + i) * HV + h;
        const float bi = B[i], gi = Gam[i];
        const float xw_ = xwk[i] + xwk[C + i] + xwk[2 * C + i] + xwk[3 * C + i];
        const float xu_ = xuv[i] + xuv[C + i] + xuv[2 * C + i] + xuv[3 * C + i];
        // ca: the zero slots of columns 32-63 left out (0 + 0 + x = x: the same sum as with them)
        const float ra_ = ra[i] + ra[C + i];
        const float ca_ = i < 32 ? ca[i] + ca[32 + i] + ca[64 + i] + ca[96 + i] : ca[96 + i] + ca[128 + i];
        const float dbeta = xu_ + gi * xw_ + ra_;
        if (gates.a.p)
          st(gr.db, o, gate_db(dbeta, bi));
        else
          st(gr.dbeta, o, dbeta);
        d[r] = gr.dg[o] + bi * gi * xw_ + bi * ra_ - ca_;
      }
    }
    d[0] += d[1];
    const float after = gdn_chunk::later_lanes_sum(d[0]);  // the rows after this lane's
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * lane + r;
      if (i >= cr.len) continue;
      const int64_t o = (cr.t0 + i) * HV + h;
      if (gates.a.p)
        st(gr.da, o, gate_da(d[r] + after, gates.a, gates.A_log, gates.dt_bias, o, h));
      else
        gr.dg[o] = d[r] + after;
    }
  }
}

}  // namespace

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (dev/emu/gdn)
size_t gdn_wy_grad_mma_smem() {
  return wy_grad_mma_smem<128, 128>();
}

cudaError_t launch_gdn_wy_grad_mma(const KernelPolicy& pol, const GdnQK& qk, KIn v, const GdnGates& gates,
                                   const float* Gc, const int32_t* chunks, int nchunks, const void* T16,
                                   const void* dW16, const void* dvn16, const void* dk_part16, void* dkh16,
                                   KOut dv_out, const GdnGateGrads& gr, int64_t HK, int64_t HV, int dk,
                                   int dv, cudaStream_t s) {
  const int kind = gdn_qk_kind(qk);
  if (!gdn_chunk_mma_supported(dk, dv) || kind < 0) return cudaErrorInvalidValue;
  auto* kern = kind == 1 ? gdn_chunk_wy_grad_mma_kernel<128, 128, true>
                         : gdn_chunk_wy_grad_mma_kernel<128, 128, false>;
  const int smem = static_cast<int>(wy_grad_mma_smem<128, 128>());
  cudaError_t e = set_launch_smem(pol, kern, smem);
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), NT, smem, s>>>(
      qk, v, gates, Gc, chunks, static_cast<const bf16*>(T16), static_cast<const bf16*>(dW16),
      static_cast<const bf16*>(dvn16), static_cast<const bf16*>(dk_part16), static_cast<bf16*>(dkh16), dv_out,
      gr, HK, HV);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
