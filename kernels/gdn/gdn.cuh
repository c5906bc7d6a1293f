// Launchers for the Gated DeltaNet ops: gates (gates.cu), L2 norm helpers (l2norm.cu), and the first
// (recurrent, fp32-state) core forward/backward (core_fwd.cu, core_bwd.cu: the fallback for devices and head
// dims whose chunked kernels' tiles do not fit the shared memory per block).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kernel_policy.h"
#include "common/kptr.h"

namespace deltatune::kernels {

// a, b, beta (T, HV); A_log, dt_bias (HV); g F32 (T, HV).
cudaError_t launch_gdn_gates_fwd(KIn a, KIn b, KIn A_log, KIn dt_bias, float* g, KOut beta, int64_t T, int64_t HV,
                                 cudaStream_t s);
// dg, dbeta (T, HV); da, db (T, HV).
cudaError_t launch_gdn_gates_bwd(KIn dg, KIn dbeta, KIn a, KIn b, KIn A_log, KIn dt_bias, KOut da, KOut db, int64_t T,
                                 int64_t HV, cudaStream_t s);

// y F32 (rows, n) (=) scale·x/sqrt(Σx² + eps) unless y is null; rstd F32 (rows) (=) 1/sqrt(Σx² + eps).
cudaError_t launch_l2norm_fwd(KIn x, float scale, float eps, float* y, float* rstd, int64_t rows, int64_t n,
                              cudaStream_t s);
// Sum of GVA groups then L2-norm backward. dyh (T, HV, n; F32, or BF16 from the tensor-core backward) holds
// the gradient w.r.t. scale·x̂ per value head; value heads r·j .. r·j+r−1 share key head j.
// dx (T, HK, n) (=) rstd·(dŷ − x̂·Σ(dŷ⊙x̂)), dŷ = scale·Σ_group dyh.
cudaError_t launch_l2norm_bwd_gva(KIn dyh, KIn x, const float* rstd, float scale, KOut dx, int64_t T, int64_t HK,
                                  int64_t HV, int64_t n, cudaStream_t s);
// Two of those (q's and k's) with the same T, HK, HV, n: one launch where the n = 128 kernel takes them.
struct L2BwdArgs {
  KIn dyh, x;
  const float* rstd = nullptr;
  float scale = 1.f;
  KOut dx;
};
cudaError_t launch_l2norm_bwd_gva2(const L2BwdArgs& a, const L2BwdArgs& b, int64_t T, int64_t HK, int64_t HV,
                                   int64_t n, cudaStream_t s);

// Core forward. qn, kn F32 (T, HK, dk) already normalised (qn also scaled); v (T, HV, dv); g F32 (T, HV);
// beta (T, HV); o (T, HV, dv) (=).
cudaError_t launch_gdn_core_fwd(const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                                const int32_t* cu_seqlens, int nseq, KOut o, int64_t HK, int64_t HV, int dk, int dv,
                                cudaStream_t s);

// The core backward checkpoints the fp32 state every kGdnCkpt tokens of each sequence in global scratch
// (F32 (Σ_n ceil(len_n/kGdnCkpt), HV, dk, dv)) and replays from sub-checkpoints every kGdnSub tokens.
constexpr int kGdnCkpt = 64;
// Value columns per block: columns of the state are independent, so blocks split them.
constexpr int kGdnCols = 32;
constexpr int kGdnSub = 8;
int64_t gdn_core_bwd_ckpt_floats(const int32_t* host_cu_seqlens, int nseq, int64_t HV, int dk, int dv);
// Dynamic shared memory the kernels need, to check against the device limit before launching. The per-token
// kernels are the last fallback (gdn_chunk_mma_fits): head dims neither the tensor-core nor the FMA chunk
// kernels take on the device.
size_t gdn_core_fwd_smem(int dk, int dv);
size_t gdn_core_bwd_smem(int dk, int dv);

// Core backward. dO (T, HV, dv). Outputs: dqh, dkh F32 (T, HV, dk) (+=) gradients w.r.t. the normalised
// (and, for q, scaled) inputs per value head; dv (T, HV, dv) (=); dg, dbeta F32 (T, HV) (+=). The (+=)
// outputs are sums over column groups (atomics): the caller zeroes them.
cudaError_t launch_gdn_core_bwd(KIn dout, const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                                const int32_t* cu_seqlens, int nseq, float* dqh, float* dkh, KOut dv_out, float* dg,
                                float* dbeta, float* ckpt, int64_t HK,
                                int64_t HV, int dk, int dv, cudaStream_t s);

// ---- chunked algorithm (spec §4.2/4.3), chunk_fwd.cu / chunk_bwd.cu ----
constexpr int kGdnChunk = 64;
constexpr float kGdnL2Eps = 1e-6f;  // the q/k L2 norm's eps (spec §3.4 step 7: fixed, not rms_norm_eps)
constexpr int kChunkBV = 32;  // value columns per scan block (half that when few blocks would run)
// Value columns per scan block for `pairs` (sequence, value head) pairs: kChunkBV, or kChunkBV / 2 when the
// grid would not fill the GPU's multiprocessors.
int gdn_scan_tile_cols(int64_t pairs, int dv, int sms);
size_t gdn_chunk_prep_smem(int dk, int dv);
size_t gdn_chunk_scan_smem(int dk, int dv);
// chunks I32 (nchunks, 2): (first token, length ≤ 64), chunks of a sequence consecutive and never crossing
// its end; chunk_off I32 (nseq + 1): first chunk of each sequence. Scratch (F32): W (T, HV, dk),
// U (T, HV, dv), M (nchunks, HV, 64, 64), Gc (T, HV); states (nchunks, HV, dk, dv) (=) the state at each
// chunk's start when not null. o (T, HV, dv) (=) unless o.p is null. For the backward's recompute:
// Tout (nchunks, HV, 64, 64) (=) T = (I + A)^{-1} and vnew (T, HV, dv) (=) V' when not null.
// fp32 FMA kernels (any head dims): the fallback for head dims the tensor-core kernels do not take (dk = dv =
// 128 always runs launch_gdn_chunk_prep_mma and launch_gdn_chunk_scan_mma, gdn_chunk_mma_fits; at 128 these
// tiles would not fit 99 KiB: prep 99,840, scan 140,800 B).
cudaError_t launch_gdn_chunk_fwd(const KernelPolicy& pol, const float* qn, const float* kn, KIn v,
                                 const float* g, KIn beta, const int32_t* chunks, int nchunks,
                                 const int32_t* chunk_off, int nseq, KOut o, float* W, float* U, float* M,
                                 float* Gc, float* states, int64_t HK, int64_t HV, int dk, int dv,
                                 cudaStream_t s, float* Tout = nullptr, float* vnew = nullptr);

// Chunked backward (spec §4.3, chunk_bwd.cu), after launch_gdn_chunk_fwd ran with states, Tout and vnew:
// reverse state scan (dh, dV'), state products, intra-chunk and WY backward. Inputs as the forward plus
// dout (T, HV, dv) and its scratch (W, M, Gc, T, states, V'). Scratch: dh (nchunks, HV, dk, dv),
// dvn (T, HV, dv), gsum (nchunks, HV). W is overwritten with dW. Outputs: dqh, dkh F32 (T, HV, dk) (=)
// per value head w.r.t. the normalised (q: scaled) inputs; dv (T, HV, dv) (=); dg, dbeta F32 (T, HV) (=).
// fp32 FMA kernels: the fallback for head dims the tensor-core backward does not take (as the forward's).
size_t gdn_chunk_bwd_smem(int dk, int dv);
cudaError_t launch_gdn_chunk_bwd(const KernelPolicy& pol, KIn dout, const float* qn, const float* kn, KIn v,
                                 KIn beta, const int32_t* chunks, int nchunks, const int32_t* chunk_off,
                                 int nseq, float* W, const float* M, const float* Gc, const float* Tm,
                                 const float* states, const float* vnew, float* dh, float* dvn, float* gsum,
                                 float* dqh, float* dkh, KOut dv_out, float* dg, float* dbeta, int64_t HK,
                                 int64_t HV, int dk, int dv, cudaStream_t s);

// ---- tensor-core (bf16 mma.sync, fp32 accumulate) chunk kernels ----
// Where they read the gates (T, HV): g (F32) and beta as given, or, when a.p is set, formed from the raw
// inputs while loading exactly as launch_gdn_gates_fwd forms them (gdn/gate_math.cuh): g = −e^{A_log}·
// softplus(a + dt_bias), β = σ(b); a, b (T, HV), A_log, dt_bias (HV). g and beta are then not read, and the
// backward writes da, db (GdnGateGrads) in place of dg, dβ: no gate tensors and no gate kernels around the
// core.
struct GdnGates {
  const float* g = nullptr;
  KIn beta{};
  KIn a{}, b{}, A_log{}, dt_bias{};
};
// The backward's gate gradients: dg F32 (T, HV) (=) and dbeta (T, HV) (=), or with raw gates da, db (T, HV)
// (=) (dg is then still the F32 scratch the kernels accumulate dg in).
struct GdnGateGrads {
  float* dg = nullptr;
  KOut dbeta{}, da{}, db{};
};
// The tensor-core path keeps its chunk scratch in bf16 (bf16 bit patterns behind void pointers): every one of
// these tensors is only ever an mma operand, so rounding it once where it is written gives the same products
// as rounding it where it is staged, at half the bytes (and copied into shared memory without conversion):
//   W16      (T, HV, dk)             prep (GdnScanBf16::W)
//   M16, T16 (nchunks, HV, 64, 64)   prep (GdnScanBf16::M, ::T)
//   states16 (nchunks, HV, dk, dv)   forward scan: the state at each chunk's start
//   vnew16   (T, HV, dv)             forward scan: V'
//   dh16     (nchunks, HV, dk, dv)   reverse scan: dS at each chunk's end
//   dvn16    (T, HV, dv)             reverse scan: dV'
//   dW16     (T, HV, dk)             state products
//   dqh16    (T, HV, dk)             state products + intra: dq̂ per value head (the L2 backward reads it)
//   dkh16    (T, HV, dk)             WY backward: the final dk̂ per value head (likewise)
//   dk_part16 (T, HV, dk)            state products + intra: the dk̂ partial sums the WY kernel adds to
// q̂, k̂ (fp32, per key head, or q, k before the norm with ρ: GdnQK) and G stay fp32.
// Head dims the tensor-core kernels are built for: dk = dv = 128.
bool gdn_chunk_mma_supported(int dk, int dv);
// q̂ = scale·q·ρ_q and k̂ = k·ρ_k as a backward kernel reads them: q, k before the L2 norm (BF16, (T, HK, dk))
// with their ρ (F32 (T, HK), GdnNormOut's rq, rk; q̂, k̂ formed as l2norm_row.cuh forms them: bit-identical
// to the prep's), or, with rq and rk null, q̂ and k̂ themselves (F32, scale 1).
struct GdnQK {
  KIn q, k;
  const float* rq = nullptr;
  const float* rk = nullptr;
  float scale = 1.f;
};
// 1: BF16 q, k with ρ; 0: F32 q̂, k̂ without; −1: neither (the launchers refuse it).
inline int gdn_qk_kind(const GdnQK& qk) {
  if (qk.rq && qk.rk && qk.q.t == KType::BF16 && qk.k.t == KType::BF16) return 1;
  return !qk.rq && !qk.rk && qk.q.t == KType::F32 && qk.k.t == KType::F32 ? 0 : -1;
}

// 2 + 3. state products and intra-chunk terms in one persistent kernel (chunk_bwd_mma.cu): dqh16, dk_part16
// (bf16) (=), dW16 (=), gsum (=) and dg (=) (the intra row sums plus the chunk's gsum term on its last row);
// the contracts of chunk_bwd.cu's kernels 2 and 3 together.
cudaError_t launch_gdn_chunk_grad_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const float* Gc,
                                      const int32_t* chunks, int nchunks, const void* states16,
                                      const void* dh16, const void* vnew16, const void* dvn16, void* dqh16,
                                      void* dk_part16, void* dW16, float* gsum, float* dg, int64_t HK,
                                      int64_t HV, int dk, int dv, cudaStream_t s, KOut dq = {},
                                      const void* states_odd16 = nullptr, int64_t T = 0);
// With dq.p set the kernel also runs the L2 norm's backward for q (the value heads of a key head in one
// block) and writes dq (T, HK, dk) (=) instead of dqh16: only for gdn_grad_fuses_dq's inputs (BF16 q, k with
// ρ, BF16 dO, HV a multiple of HK, dq 8-byte aligned), else the launch is refused. With states_odd16 set,
// states16 holds the even chunks' states and states_odd16 the odd ones' (both at slot chunk / 2:
// GdnHalfStates). T (the tokens) lets it run the wgmma + TMA kernel below on Hopper (0: the mma.sync kernel).
bool gdn_grad_fuses_dq(const GdnQK& qk, KIn dout, KOut dq, int64_t HK, int64_t HV);
// The same contract on Hopper's warpgroup tensor cores with TMA copies (chunk_grad_wgmma.cu, sm_90a):
// launch_gdn_chunk_grad_mma calls it where gdn_grad_wgmma_selected (BF16 q, k with ρ, BF16 dO, dk = dv = 128, the
// Hopper policy); cudaErrorNotSupported where the
// tensor maps cannot be made (T 0, or the driver refuses them).
bool gdn_grad_wgmma_selected(const KernelPolicy& pol, const GdnQK& qk, KIn dout, int dk, int dv);
cudaError_t launch_gdn_chunk_grad_wgmma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const float* Gc,
                                        const int32_t* chunks, int nchunks, const void* states16,
                                        const void* dh16, const void* vnew16, const void* dvn16, void* dqh16,
                                        void* dk_part16, void* dW16, float* gsum, float* dg, int64_t HK,
                                        int64_t HV, cudaStream_t s, KOut dq, const void* states_odd16,
                                        int64_t T);
// 4. WY backward (chunk_wy_mma.cu): dkh16 (=) dk_part16 + the WY terms (bf16), dv (=), dg (+= then reverse
// cumsum within each chunk), dbeta (=); contract of chunk_bwd.cu's kernel 4 with the dk̂ sum written as bf16
// elsewhere. With raw gates it writes da, db from the final dg, dβ instead (gr.dg is still read and written).
cudaError_t launch_gdn_wy_grad_mma(const KernelPolicy& pol, const GdnQK& qk, KIn v, const GdnGates& gates,
                                   const float* Gc, const int32_t* chunks, int nchunks, const void* T16,
                                   const void* dW16, const void* dvn16, const void* dk_part16, void* dkh16,
                                   KOut dv_out, const GdnGateGrads& gr, int64_t HK, int64_t HV, int dk,
                                   int dv, cudaStream_t s);
// The WY backward on wgmma with TMA copies (wy_grad_wgmma.cu, sm_90a) for bf16 k with ρ, 16-byte aligned bf16
// v, dk = dv = 128 (selected: also the Hopper policy);
// the contract of launch_gdn_wy_grad_mma; with dk set, the value heads of a key head run back to back in one
// block and it writes dk (the L2 backward of k, dkh16 unused) instead; cudaErrorNotSupported where the tensor
// maps cannot be made (T 0, or the driver refuses them).
bool gdn_wy_wgmma_selected(const KernelPolicy& pol, const GdnQK& qk, KIn v, int dk, int dv);
cudaError_t launch_gdn_wy_grad_wgmma(const KernelPolicy& pol, const GdnQK& qk, KIn v, const GdnGates& gates,
                                     const float* Gc, const int32_t* chunks, int nchunks, const void* T16,
                                     const void* dW16, const void* dvn16, const void* dk_part16, void* dkh16,
                                     KOut dv_out, const GdnGateGrads& gr, int64_t HK, int64_t HV,
                                     cudaStream_t s, int64_t T, KOut dk = {});
// The whole tensor-core backward after the recompute: reverse scan, 2 + 3, 4 (chunk_bwd.cu).
struct GdnBwdBf16 {
  const void* W16 = nullptr;
  const void* M16 = nullptr;
  const void* T16 = nullptr;
  const void* states16 = nullptr;
  const void* vnew16 = nullptr;
  void* dh16 = nullptr;
  void* dvn16 = nullptr;
  void* dW16 = nullptr;
  void* dqh16 = nullptr;  // outputs: dq̂, dk̂ per value head (for launch_l2norm_bwd_gva)
  void* dkh16 = nullptr;
  KOut dq;  // set: dq itself in place of dqh16 (launch_gdn_chunk_grad_mma's fused L2 backward)
  // set (with dq): dk itself (=), the L2 backward of k summed over each key head's value heads, in the WY
  // kernel on Hopper (launch_gdn_wy_grad_wgmma) or by launch_l2norm_bwd_gva from dkh16 after it
  KOut dk;
  bool image = false;
  const void* states_odd16 = nullptr;  // set: states16 holds the even chunks only (GdnHalfStates)
  int64_t tokens = 0;                  // T (the state/intra kernel's TMA maps need the tensors' extent)
};
// image: W16, M16 are operand images (GdnScanBf16::image, written by the backward's prep from the kept
// states, or by the forward prep of a recompute with output): the reverse scan runs on wgmma
// (launch_gdn_chunk_dscan_wgmma) for bf16 dO, q, k, else on mma.sync reading them. dk_part16: bf16
// scratch (T, HV, dk) for the dk̂ partial sums between the kernels. Each kernel is refused
// (cudaErrorInvalidValue) for q, k that are neither BF16 with ρ nor F32 without (GdnQK).
cudaError_t launch_gdn_chunk_bwd_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, KIn v,
                                     const GdnGates& gates, const int32_t* chunks, int nchunks,
                                     const int32_t* chunk_off, int nseq, const float* Gc, const GdnBwdBf16& b,
                                     float* gsum, void* dk_part16, KOut dv_out, const GdnGateGrads& gr,
                                     int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s);

// ---- bf16 operands of the tensor-core forward scan, written by its prep (BF16 scratch, bf16 bit patterns)
// ---- Rounded (round to nearest even) from the fp32 values exactly as the scan's fp32 staging rounds them,
// so the scan's results do not depend on which it reads. Rows past a chunk's end are not written (the scan
// zero-fills).
//   W  (T, HV, dk)               bf16(W)
//   Kd (T, HV, dk)               bf16(K̂_i·e^{G_last − G_i}), G the chunk-local cumsum (Gc), G_last its last
//   row Q  (T, HK, dk)               bf16(Q̂) (written by the first value head of each key head) M  (nchunks,
//   HV, 64, 64)     bf16(M), all 64 rows T  (nchunks, HV, 64, 64)     bf16(T), T = (I + A)^{-1} as Tout (the
//   backward's WY kernel reads it)
// T_kept: bf16(T) as an earlier prep over the same inputs wrote it (the forward of GdnKeep::States); the prep
// then reads it instead of forming K̂K̂ᵀ and solving for T (and writes no T).
// A null member is not written; the scan reads the set when W and Kd (and, with output, Q and M) are given,
// else it stages the fp32 scratch.
// image: W, Kd, Q and M are written as the wgmma scan's operand images instead (gdn_scan_image_index): per
// (chunk, head) one 64-row tile, W (nchunks, HV, 64, dk), M (nchunks, HV, 64, 64), Q and Kd (nchunks, HK, 64,
// dk) with Kd = bf16(K̂) per key head (the scan applies e^{G_last − G_i} to V' instead), their rows past a
// chunk's end zero. Only launch_gdn_chunk_scan_wgmma reads them so.
struct GdnScanBf16 {
  void* W = nullptr;
  void* Kd = nullptr;
  void* Q = nullptr;
  void* M = nullptr;
  void* T = nullptr;
  const void* T_kept = nullptr;
  bool image = false;
  void* U =
      nullptr;  // image mode: U (T, HV, dv) in bf16, written instead of the fp32 U (the wgmma scan reads it)
  // The scan's states16: only the even chunks' states, chunk c's at slot c / 2 ((nchunks + 1) / 2 slots; the
  // GdnKeep::States forward that also keeps V', see GdnHalfStates).
  bool states_even = false;
  int64_t tokens = 0;  // T: lets the forward prep run on wgmma with TMA copies (launch_gdn_fwd_prep_wgmma)
};

// Element (r, c) of a 64-row operand image tile: the tensor cores' 8 x 8 core matrices, column group major
// (8 columns of the 64 rows, then the next 8), so the scan copies a tile as one contiguous block.
__host__ __device__ constexpr int64_t gdn_scan_image_index(int r, int c) {
  return (int64_t(c >> 3) * kGdnChunk + r) * 8 + (c & 7);
}

// ---- tensor-core forward scan, chunk_scan_mma.cu (dk = dv = 128) ----
// Same contract as the FMA scan of launch_gdn_chunk_fwd (after its prep): o (=) unless o.p is null, states16
// and vnew16 (bf16, see GdnBwdBf16) (=) when not null. With o.p null the scan leaves out the output's tiles
// and products (a shorter serial path). bv: the column tile the launcher picks (gdn_scan_tile_cols, or 64
// with the bf16 operands when BV 32 would take more than one wave; never 64 nor prefetching under the portable
// policy).
cudaError_t launch_gdn_chunk_scan_mma(const KernelPolicy& pol, const float* qn, const float* kn,
                                      const float* W, const float* U, const float* M, const float* Gc,
                                      const int32_t* chunks, const int32_t* chunk_off, int nseq, KOut o,
                                      void* states16, void* vnew16, int64_t HK, int64_t HV, int dk, int dv,
                                      cudaStream_t s, const GdnScanBf16* b16 = nullptr);

// The variant with output on Hopper's warpgroup tensor cores (chunk_scan_wgmma.cu, sm_90a; column tile bv 16,
// 32 or 64 as launch_gdn_chunk_scan_mma picks it): same results contract, reading the prep's operand images
// (GdnScanBf16::image). launch_gdn_chunk_scan_mma calls it for images; gdn_scan_wgmma_selected says whether a
// scan of `pairs` (sequence, value head) pairs with output takes this kernel (the Hopper policy), i.e. whether the prep is to write images (and U in bf16, GdnScanBf16::U).
bool gdn_scan_wgmma_selected(const KernelPolicy& pol, int64_t pairs, int dv, bool with_o);
cudaError_t launch_gdn_chunk_scan_wgmma(const KernelPolicy& pol, const float* Gc, const int32_t* chunks,
                                        const int32_t* chunk_off, int nseq, KOut o, void* states16,
                                        void* vnew16, int64_t HK, int64_t HV, const GdnScanBf16& b16, int bv,
                                        cudaStream_t s);

// ---- tensor-core forward prep, chunk_prep_mma.cu ----
// Same contract as the prep step of launch_gdn_chunk_fwd (gdn_chunk_prep_kernel), except that it takes q and k
// before the L2 norm (T, HK, dk) and normalises them while loading (q̂ = scale·q/‖q‖, k̂ = k/‖k‖ with
// GdnNormOut::eps, bit-identical to launch_l2norm_fwd): Gc (T, HV), W, U (rows of the chunks),
// M (nchunks, HV, 64, 64) and, when not null, Tout (nchunks, HV, 64, 64) = (I + A)^{-1} with zeros above the
// diagonal and identity rows past each chunk's end. dk = dv = 128 only (gdn_chunk_mma_supported;
// cudaErrorInvalidValue otherwise). Smem size 0 when unsupported. b16: the bf16 copies (=) where not null; the fp32
// W, M and Tout may then be null (the tensor-core path reads only the bf16 ones; U stays fp32).
// Backward with the chunk-start states kept from the forward (states16, bf16 as the forward scan writes them):
// vnew16 (T, HV, dv) (=) V' = U − bf16(W)·S as the forward scan forms it, instead of U (then null), so the
// backward needs no serial recompute scan.
// Backward with half the states and V' kept (half set; BF16 q, k, v only): states16 holds the even chunks'
// states (GdnScanBf16::states_even), half->vnew the forward scan's V'; the prep writes W and M (no U, no V')
// and, for each even chunk c whose sequence goes on, half->odd's slot c / 2 (=) the state at chunk c + 1:
//   S_{c+1} = γ_last·S_c + K̂_cᵀ·diag(e^{G_last − G_i})·V'_c      (the forward scan's state update)
// from the kept bf16 S_c and V'_c (zeros when chunk c + 1 starts another sequence). This leaves out the v
// load, U and the V' product of every chunk for one 128 x 128 x 64 product on every second one.
// q, k: 16-byte aligned rows.
struct GdnNormOut {
  float eps = kGdnL2Eps;
  // When rq, rk are not null: ρ_q, ρ_k F32 (T, HK) (=), and when qn, kn are not null also q̂, k̂ F32
  // (T, HK, dk) (=), as launch_l2norm_fwd's rstd and y (the backward's other kernels read them).
  float* qn = nullptr;
  float* kn = nullptr;
  float* rq = nullptr;
  float* rk = nullptr;
  // rq, rk already hold ρ_q, ρ_k (kept from a forward prep over the same q, k): the Hopper lean prep and odd
  // states read them instead of forming them from the tiles; the other kernels form and write the same values.
  bool rho_kept = false;
};
// What a GdnKeep::States forward keeps besides T when it keeps V' and the even chunks' states instead of
// every chunk's state (at 8K tokens, HV 32: 64 + 64 MiB instead of 128 MiB), for the backward's prep. The
// launcher then runs a lean prep (M, W) and the odd chunks' states: in the same pass on Hopper with ρ kept
// (launch_gdn_lean_prep_wgmma), else gdn_odd_states_kernel after it (needs Gc: cudaErrorInvalidValue without).
struct GdnHalfStates {
  const void* vnew = nullptr;          // V' (T, HV, dv) bf16 as the forward scan wrote it
  void* odd = nullptr;                 // (=) the odd chunks' states (nchunks / 2, HV, dk, dv) bf16, slot c / 2
  const int32_t* chunk_off = nullptr;  // I32 (nseq + 1): first chunk of each sequence
  int nseq = 0;
  int64_t tokens = 0;  // T: lets the odd states run on wgmma with TMA copies (launch_gdn_odd_states_wgmma)
};
// The odd chunks' states of the half-states keep on Hopper's warpgroup tensor cores with TMA copies
// (odd_states_wgmma.cu, sm_90a): launch_gdn_chunk_prep_mma's lean path calls it; cudaErrorNotSupported where it
// does not apply (T unknown, not the Hopper policy, tensor maps refused), and the mma.sync kernel forms them instead.
// rk_kept: ρ_k (T, HK) as the forward prep wrote it (GdnNormOut::rho_kept), read instead of formed from k.
cudaError_t launch_gdn_odd_states_wgmma(const KernelPolicy& pol, KIn k, float eps, const float* Gc,
                                        const int32_t* chunks, int nchunks, const void* states16,
                                        const GdnHalfStates& half, int64_t HK, int64_t HV, cudaStream_t s,
                                        const float* rk_kept = nullptr);
// The forward prep for the wgmma scan (images, bf16 U; no kept T, no states) on Hopper's warpgroup tensor cores
// with TMA copies (fwd_prep_wgmma.cu, sm_90a): bf16 q, k, v; b16.W, M, Kd, Q, U (and T when not null), Gc and ρ
// (nout) as gdn_chunk_prep_mma_kernel<true> writes them; cudaErrorNotSupported where it does not apply (T
// unknown, other inputs or outputs, not the Hopper policy, tensor maps refused).
cudaError_t launch_gdn_fwd_prep_wgmma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                      const GdnNormOut& nout, KIn v, const GdnGates& gates,
                                      const int32_t* chunks, int nchunks, float* Gc, const GdnScanBf16& b16,
                                      int64_t HK, int64_t HV, int64_t T, cudaStream_t s);
// The half-states backward's lean prep on Hopper's warpgroup tensor cores with TMA copies (lean_prep_wgmma.cu,
// sm_90a): bf16 q, k, the kept T, image outputs (b16.W, b16.M), Gc and ρ (nout) as the lean
// gdn_chunk_prep_mma_kernel writes them; cudaErrorNotSupported where it does not apply (T unknown, other
// inputs or outputs, not the Hopper policy, tensor maps refused). With half, states16 and odd_done (and ρ kept)
// it also forms the odd chunks' states in the same pass, as launch_gdn_odd_states_wgmma would after it, and
// sets *odd_done.
cudaError_t launch_gdn_lean_prep_wgmma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                       const GdnNormOut& nout, const GdnGates& gates, const int32_t* chunks,
                                       int nchunks, float* Gc, const GdnScanBf16& b16, int64_t HK, int64_t HV,
                                       int64_t T, cudaStream_t s, const GdnHalfStates* half = nullptr,
                                       const void* states16 = nullptr, bool* odd_done = nullptr);
size_t gdn_chunk_prep_mma_smem(int dk, int dv);  // the most any variant asks for (fp32 inputs: hi + lo split)
size_t gdn_chunk_prep_mma_raw_smem();             // bf16 q, k, v (the model's path)
cudaError_t launch_gdn_chunk_prep_mma(const KernelPolicy& pol, KIn q, KIn k, float scale,
                                      const GdnNormOut& nout, KIn v, const GdnGates& gates,
                                      const int32_t* chunks, int nchunks, float* W, float* U, float* M,
                                      float* Gc, float* Tout, int64_t HK, int64_t HV, int dk, int dv,
                                      cudaStream_t s, const GdnScanBf16* b16 = nullptr,
                                      const void* states16 = nullptr, void* vnew16 = nullptr,
                                      const GdnHalfStates* half = nullptr);

// ---- the reverse state scan on Hopper's warpgroup tensor cores, chunk_dscan_wgmma.cu (sm_90a) ----
// The contract of launch_gdn_chunk_dscan_mma for bf16 dO, q, k (GdnQK with ρ) with W16, M16 as the backward
// prep's operand images (GdnBwdBf16::image). gdn_dscan_wgmma_selected: whether a backward from kept states of
// `pairs` (sequence, value head) pairs takes it (its 64-column tile, the Hopper policy), i.e. whether the
// backward's prep is to write images; a recompute's images (1 x 4096 at HV 16 / 32) take its 32-column tile.
// T (the tokens, 0: unknown) lets it bring q, k and dO by TMA (else by cp.async).
bool gdn_dscan_wgmma_selected(const KernelPolicy& pol, int64_t pairs, int dv);
cudaError_t launch_gdn_chunk_dscan_wgmma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const void* W16,
                                         const void* M16, const float* Gc, const int32_t* chunks,
                                         const int32_t* chunk_off, int nseq, void* dh16, void* dvn16,
                                         int64_t HK, int64_t HV, cudaStream_t s, int64_t T = 0);

// ---- tensor-core reverse state scan, chunk_dscan_mma.cu ----
// Same contract as step 1 of launch_gdn_chunk_bwd (the FMA dscan kernel): per sequence, chunks in reverse,
// dh16 (nchunks, HV, dk, dv) (=) dS at each chunk's end, dvn16 (T, HV, dv) (=) dV' (bf16, see GdnBwdBf16);
// W16, M16: the prep's bf16 W and M. dk = dv = 128 only (gdn_chunk_mma_supported; else
// cudaErrorInvalidValue, also for q, k that are neither BF16 with ρ nor F32 without). Every pointer 16-byte
// aligned.
// one_set: the variant with one set of chunk operands instead of two (no copy ahead; the portable policy's,
// gdn_dscan_mma_one_set: within 99 KiB at every column tile). img: W16, M16 are operand images
// (GdnBwdBf16::image) for q, k or dO not in bf16, which the wgmma reverse scan does not take: the same results.
size_t gdn_chunk_dscan_mma_smem(int dk, int dv, int bv, bool one_set);  // 0 when unsupported
bool gdn_dscan_mma_one_set(const KernelPolicy& pol);
// Dynamic shared memory of the other portable (mma.sync) kernels at dk = dv = 128, every variant a launcher
// may pick (0 for a variant that does not exist): the forward scan (column tile bv, prefetching, with output,
// bf16 operands), the state/intra backward (raw: bf16 q, k with ρ), the WY backward, the lean prep and the
// odd states. The kernel policy test checks them against the portable limit.
size_t gdn_chunk_scan_mma_smem(int bv, bool pf, bool with_o, bool b16);
// The most of it any forward scan variant launch_gdn_chunk_scan_mma may pick under `pol` asks for: under the
// portable policy only BV 16/32 without prefetch.
size_t gdn_chunk_scan_mma_smem_max(const KernelPolicy& pol);
// The most shared memory per block any kernel of the tensor-core path may ask for at dk = dv = 128 under
// `pol`: at most 99 KiB under the portable policy, so every supported GPU runs the chunked tensor-core path.
size_t gdn_chunk_mma_smem_needed(const KernelPolicy& pol);
// Whether the GDN core runs the chunked tensor-core kernels for these head dims under `pol`: dk = dv = 128
// (every Qwen3.5 model) and a device whose opt-in shared memory per block takes all of their tiles. The
// fallbacks, for other head dims only: the fp32 FMA chunk kernels (chunk_fwd.cu, chunk_bwd.cu) where their
// tiles fit the device (gdn_chunk_prep_smem, gdn_chunk_scan_smem, gdn_chunk_bwd_smem; at 99 KiB and dk = dv =
// 64 the forward's fit, the backward's WY tile does not), else the per-token kernels (core_fwd.cu,
// core_bwd.cu).
bool gdn_chunk_mma_fits(const KernelPolicy& pol, int dk, int dv);
size_t gdn_chunk_grad_mma_smem(bool raw);
size_t gdn_wy_grad_mma_smem();
size_t gdn_lean_prep_mma_smem();
size_t gdn_odd_states_mma_smem();
cudaError_t launch_gdn_chunk_dscan_mma(const KernelPolicy& pol, KIn dout, const GdnQK& qk, const void* W16,
                                       const void* M16, const float* Gc, const int32_t* chunks,
                                       const int32_t* chunk_off, int nseq, void* dh16, void* dvn16,
                                       int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s,
                                       bool img = false);

}  // namespace deltatune::kernels
