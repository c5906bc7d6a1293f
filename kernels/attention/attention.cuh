// Launchers for causal varlen attention with GQA (attention_fwd.cu, attention_bwd.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// Work is split in tiles of kAttnTile tokens that never straddle a sequence: tiles I32 (ntiles, 2) holds
// (sequence index, first token) per tile (host-built from cu_seqlens).
constexpr int kAttnTile = 16;
constexpr int kAttnMaxHeadDim = 256;
size_t attention_fwd_smem(int hd);
size_t attention_bwd_smem(int hd);

// q (T, nH, hd), k/v (T, nKV, hd), o (T, nH, hd) (=), lse F32 (T, nH) (=).
cudaError_t launch_attention_fwd(KIn q, KIn k, KIn v, const int32_t* cu_seqlens, const int32_t* tiles, int ntiles,
                                 int64_t nH, int64_t nKV, int hd, float scale, KOut o, float* lse, cudaStream_t s);
// dout, o (T, nH, hd); lse F32 (T, nH); dl F32 (T, nH) scratch; dq (T, nH, hd), dk/dv (T, nKV, hd) (=).
cudaError_t launch_attention_bwd(KIn dout, KIn q, KIn k, KIn v, KIn o, const float* lse, float* dl,
                                 const int32_t* cu_seqlens, const int32_t* tiles, int ntiles, int64_t T, int64_t nH,
                                 int64_t nKV, int hd, float scale, KOut dq, KOut dk, KOut dv, cudaStream_t s);

}  // namespace deltatune::kernels
