// Launchers for the MoE router (router.cu) and row gather/scatter helpers (rows.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/kernel_policy.h"
#include "common/kptr.h"

namespace deltatune::kernels {

// The launchers of kernels with dynamic shared memory (router forward, dispatch, grouped GEMMs) take the
// device's KernelPolicy and refuse (cudaErrorInvalidConfiguration) a launch whose shared memory would exceed it
// or the default 48 KiB per block; each has one kernel per shape on every path.
inline bool default_smem_fits(const KernelPolicy& pol, size_t bytes) {
  return bytes <= size_t(48) * 1024 && pol.smem_fits(bytes);
}
// logits (T, E); idx I32 (T, k) (=); w F32 (T, k) (=).
cudaError_t launch_moe_router_fwd(const KernelPolicy& pol, KIn logits, int64_t T, int E, int k, int32_t* idx,
                                  float* w, cudaStream_t s);
// dw, w F32 (T, k); idx I32 (T, k); dlogits (T, E) (=).
cudaError_t launch_moe_router_bwd(const float* dw, const int32_t* idx, const float* w, int64_t T, int E, int k,
                                  KOut dlogits, cudaStream_t s);
// dst[i] (=) src[rows[i]] for i < n; src (src_rows, H); rows outside [0, src_rows) give a zero row.
cudaError_t launch_gather_rows(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst,
                               cudaStream_t s);
// dst[rows[i]] (+=) scale[i]·src[i]; src (n, H); scale F32 (n) or null (= 1); atomics (rows may repeat).
cudaError_t launch_scatter_add_rows(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H,
                                    KOut dst, int64_t dst_rows, cudaStream_t s);
// out[i] (=) Σ_c a[i,c]·b[i,c]; a, b (n, H); out F32 (n).
cudaError_t launch_row_dot(KIn a, KIn b, int64_t n, int64_t H, float* out, cudaStream_t s);
// y[i, :] (=) x[i, :]·sc[i]; sc F32 (n).
cudaError_t launch_scale_rows(KIn x, const float* sc, int64_t n, int64_t H, KOut y, cudaStream_t s);


// ---- dispatch.cu: stable counting sort of the T·K routing slots by expert (see backend.h moe_dispatch) ----
constexpr int kMaxDispatchExperts = 1024;
// I32 scratch the dispatch needs for n slots and E experts.
int64_t moe_dispatch_scratch_ints(int64_t n, int E);
// idx I32 (n = T·K); offsets (E+1), row_token/row_slot/slot_row (n) (=); load F32 (E) (+=) or null.
cudaError_t launch_moe_dispatch(const KernelPolicy& pol, const int32_t* idx, int64_t n, int K, int E, int32_t* offsets, int32_t* row_token,
                                int32_t* row_slot, int32_t* slot_row, float* load, int32_t* scratch, cudaStream_t s);

// ---- glu.cu: SwiGLU on the expert GEMM's packed [gate | up] rows -------------------------------------------
// h[i, c] (=) silu(gu[i, c])·gu[i, I + c]; gu (n, 2I), h (n, I).
cudaError_t launch_swiglu_packed_fwd(KIn gu, int64_t n, int64_t I, KOut h, cudaStream_t s);
// dgu[i, c] (=) dh·up·silu'(gate), dgu[i, I + c] (=) dh·silu(gate); dh (n, I), gu and dgu (n, 2I).
cudaError_t launch_swiglu_packed_bwd(KIn dh, KIn gu, int64_t n, int64_t I, KOut dgu, cudaStream_t s);

// ---- permute.cu ---------------------------------------------------------------------------------------------
// out[t, c] (=) Σ_{j<K} w[t·K+j]·y[slot_row[t·K+j], c] (w null = 1); y (M, H), out (T, H).
cudaError_t launch_moe_combine(KIn y, const int32_t* slot_row, const float* w, int64_t T, int K, int64_t H, KOut out,
                               cudaStream_t s);
// dst (=) src (d0, d1, d2) with its axes permuted: dst axis i is src axis p[i].
cudaError_t launch_permute3(KIn src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2, KOut dst,
                            cudaStream_t s);

// ---- grouped_gemm.cu: expert GEMMs with device-side row ranges ------------------------------------------------
// The expert LoRA up-projection fused into a grouped GEMM's epilogue: y[r] += scale·u[r]·L_eᵀ (trans_w: L
// [E, N, r]) or scale·u[r]·L_e (L [E, r, N]); u F32 [M, r], L F32, products in fp32. With a (trans_w only): u is
// not read but formed by the same kernel, u_out[r] (=) x[r]·A_eᵀ (a bf16 [E, r, K], fp32 accumulation).
struct GroupedLora {
  const float* u;
  const float* l;
  int64_t r;
  float scale;
  const void* a = nullptr;
  float* u_out = nullptr;
};
// Operands are both BF16 (tensor cores, fp32 accumulation) or, with fp32, both F32 (fp32 FMA).
// y[r] (=) alpha·x[r]·op(W_e) + beta·y[r] for r in [off[e], off[e+1]); x (M, K); w (E, N, K) when trans_w else
// (E, K, N); y (M, N) any float type. tile_scratch: E+1 ints. With lora (only where grouped_gemm_lora_fusable):
// the LoRA term above is added before beta·y[r], one rounding.
cudaError_t launch_grouped_gemm(const KernelPolicy& pol, const void* x, const void* w, bool fp32, bool trans_w, const int32_t* offsets, int E,
                                int64_t M, int64_t N, int64_t K, KOut y, float alpha, float beta, int32_t* tile_scratch,
                                cudaStream_t s, const GroupedLora* lora = nullptr);
// Whether the policy has a kernel that runs this bf16 grouped GEMM with the LoRA term in its epilogue (Hopper:
// the wgmma kernel, r <= 16 and a multiple of 4); otherwise the caller runs the LoRA product on its own.
bool grouped_gemm_lora_fusable(const KernelPolicy& pol, const void* x, const void* w, bool trans_w, int64_t N, int64_t K,
                               const GroupedLora& lora);
// The bf16 forward form above on Hopper's wgmma (grouped_gemm_wgmma.cu), called by launch_grouped_gemm: x and w
// 16-byte aligned, K and w's contiguous extent multiples of 8; tile_off the exclusive scan of
// ceil(rows_e / kGroupedWgmmaRows) (row_tiles: the grid's bound on its total).
constexpr int kGroupedWgmmaRows = 128;
bool grouped_gemm_wgmma_fits(const KernelPolicy& pol);
bool grouped_gemm_wgmma_lora_fits(const KernelPolicy& pol, bool trans_w, int64_t N, int64_t K, const GroupedLora& l);
cudaError_t launch_grouped_gemm_wgmma(const KernelPolicy& pol, const void* x, const void* w, bool trans_w,
                                      const int32_t* offsets, const int32_t* tile_off, int E, int64_t row_tiles,
                                      int64_t N, int64_t K, KOut y, float alpha, float beta, const GroupedLora* lora,
                                      cudaStream_t s);
// g[e] (=) alpha·Σ_{r in expert e} a[r]ᵀ·b[r] + beta·g[e]; a (M, N), b (M, K), g (E, N, K) any float type.
cudaError_t launch_grouped_gemm_wgrad(const KernelPolicy& pol, const void* a, const void* b, bool fp32, const int32_t* offsets, int E,
                                      int64_t M, int64_t N, int64_t K, KOut g, float alpha, float beta, cudaStream_t s);

}  // namespace deltatune::kernels
