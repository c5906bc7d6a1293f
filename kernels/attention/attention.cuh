// Launchers for causal varlen attention with GQA (full attention too on the FMA kernels: the vision tower).
//  - attention_{fwd,bwd}_fma.cu: fp32 FMA kernels for any dtype and head_dim ≤ 256 (first version; the
//    fallback for F32/F16 inputs, other head dims and unaligned views).
//  - attention_{fwd,bwd}_mma.cu: flash-attention-2 style kernels on tensor cores (bf16 mma.sync, fp32
//    accumulators and softmax) for BF16 q/k/v/dout and head_dim 64, 96, 128 or 256, causal or full; the
//    backend zero-pads other head dims in (64, 256] to the next of these (the 9B vision tower's 72 -> 96).
//  - attention_fwd_wgmma.cu, attention_dq_wgmma.cu, attention_dkdv_wgmma.cu: the forward and the backward's dQ
//    and dK/dV kernels on Hopper's wgmma (sm_90a) at head_dim 256 with an even number of query heads per kv
//    head (a block takes two heads of one kv head); the mma.sync launchers run them under the Hopper policy.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/kernel_policy.h"
#include "common/kptr.h"

namespace deltatune::kernels {

// Work is split in tiles of kAttnTile tokens that never straddle a sequence: tiles I32 (ntiles, 2) holds
// (sequence index, first token) per tile (host-built from cu_seqlens).
constexpr int kAttnTile = 16;
constexpr int kAttnMaxHeadDim = 256;
size_t attention_fwd_smem(int hd);
size_t attention_bwd_smem(int hd);

// q (T, nH, hd), k/v (T, nKV, hd), o (T, nH, hd) (=), lse F32 (T, nH) (=). causal false: every key of the
// sequence (the vision tower; the FMA kernels only).
// Every launcher takes the device's KernelPolicy: it picks the tiles (attention_bwd_mma_smem) and no launch
// asks for more shared memory than the policy allows (refused with cudaErrorInvalidConfiguration).
cudaError_t launch_attention_fwd(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens, const int32_t* tiles, int ntiles,
                                 int64_t nH, int64_t nKV, int hd, float scale, bool causal, KOut o, float* lse,
                                 cudaStream_t s);
// dout, o (T, nH, hd); lse F32 (T, nH); dl F32 (T, nH) scratch; dq (T, nH, hd), dk/dv (T, nKV, hd) (=).
cudaError_t launch_attention_bwd(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, KIn o, const float* lse, float* dl,
                                 const int32_t* cu_seqlens, const int32_t* tiles, int ntiles, int64_t T, int64_t nH,
                                 int64_t nKV, int hd, float scale, bool causal, KOut dq, KOut dk, KOut dv,
                                 cudaStream_t s);
// dl[row] (=) Σ_d dout[row, d]·o[row, d] for rows = T·nH (the D term of the backward).
cudaError_t launch_attention_dot(KIn dout, KIn o, float* dl, int64_t rows, int hd, cudaStream_t s);

// ---- tensor-core path -------------------------------------------------------------------------------------
// Same contracts as above, with tiles of kAttnMmaTile tokens (never straddling a sequence). q, k, v, dout
// must be BF16 and 16-byte aligned; outputs may have any dtype and alignment. The tile list may be in any
// order (the host puts the most expensive tiles first). causal false: every key of the sequence.
constexpr int kAttnMmaTile = 64;
bool attention_mma_supported(int hd);
// The smallest supported head dim >= hd (0 when hd > 256): zero columns past hd change no score, and the
// output's and gradients' extra columns are dropped.
int attention_mma_padded_hd(int hd);
// Shared memory per block of the kernels the policy runs (the largest of the backward's two kernels): the
// portable policy's dK/dV kernel walks 16-row query steps at hd 256 to stay within 99 KiB.
size_t attention_fwd_mma_smem(const KernelPolicy& pol, int hd);
size_t attention_bwd_mma_smem(const KernelPolicy& pol, int hd);
cudaError_t launch_attention_fwd_mma(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens, const int32_t* tiles,
                                     int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
                                     KOut o, float* lse, cudaStream_t s);
// q_tiles drive the dQ kernel, k_tiles the dK/dV kernel (the same tiles, each list ordered by its own cost).
// dkv_scratch: F32 2·T·nH·hd when nH > nKV (per-query-head dK, dV partials summed per kv head afterwards),
// else unused (may be null).
cudaError_t launch_attention_bwd_mma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, KIn o, const float* lse, float* dl,
                                     const int32_t* cu_seqlens, const int32_t* q_tiles, const int32_t* k_tiles,
                                     int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale, bool causal,
                                     KOut dq, KOut dk, KOut dv, float* dkv_scratch, cudaStream_t s);

// ---- Hopper forward (attention_fwd_wgmma.cu, sm_90a) --------------------------------------------------------
// launch_attention_fwd_mma's contract and tiles on wgmma; launch_attention_fwd_mma runs it under the Hopper
// policy where it applies (head_dim 256, an even number of query heads per kv head), the mma.sync kernel
// elsewhere.
// With four or more query heads per kv head (every Qwen3.5 text model) the forward and dQ blocks of two head
// pairs of one kv head form a thread-block cluster that shares each K/V tile (TMA multicast; T: the rows of
// k / v, the tensor maps' extent).
bool attention_fwd_wgmma_supported(int hd, int64_t nH, int64_t nKV);
inline bool attention_wgmma_cluster(int64_t nH, int64_t nKV) { return nKV > 0 && (nH / nKV) % 4 == 0; }
size_t attention_fwd_wgmma_smem(int hd);
cudaError_t launch_attention_fwd_wgmma(const KernelPolicy& pol, KIn q, KIn k, KIn v, const int32_t* cu_seqlens,
                                       const int32_t* tiles, int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd,
                                       float scale, bool causal, KOut o, float* lse, cudaStream_t s);
// The backward's dQ kernel on wgmma (attention_dq_wgmma.cu); launch_attention_bwd_mma runs it in place of the
// mma.sync dQ kernel under the Hopper policy where it applies (as the forward). dl: D (launch_attention_dot).
bool attention_dq_wgmma_supported(int hd, int64_t nH, int64_t nKV);
size_t attention_dq_wgmma_smem(int hd);
cudaError_t launch_attention_dq_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse,
                                      const float* dl, const int32_t* cu_seqlens, const int32_t* q_tiles,
                                      int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale,
                                      bool causal, KOut dq, cudaStream_t s);

// The backward's dK/dV kernel on wgmma (attention_dkdv_wgmma.cu); launch_attention_bwd_mma runs it in place of
// the mma.sync dK/dV kernel under the Hopper policy where it applies (as the forward). One block per (pair of
// query heads of one kv head, key tile): it writes dk / dv itself when the pair is the whole group
// (nH / nKV == 2), else F32 partials per head pair into part (2, T, attention_dkdv_wgmma_partial_heads, hd:
// dK then dV), and the pair that finishes a (kv head, key tile) last sums them into dk / dv (counters after the
// partials: part is launch_attention_bwd_mma's dkv_scratch, F32 2·T·nH·hd).
bool attention_dkdv_wgmma_supported(int hd, int64_t nH, int64_t nKV);
size_t attention_dkdv_wgmma_smem(int hd);
int64_t attention_dkdv_wgmma_partial_heads(int64_t nH, int64_t nKV);  // 0: no partials
cudaError_t launch_attention_dkdv_wgmma(const KernelPolicy& pol, KIn dout, KIn q, KIn k, KIn v, const float* lse,
                                        const float* dl, const int32_t* cu_seqlens, const int32_t* k_tiles,
                                        int ntiles, int64_t T, int64_t nH, int64_t nKV, int hd, float scale,
                                        bool causal, KOut dk, KOut dv, float* part, cudaStream_t s);

}  // namespace deltatune::kernels
