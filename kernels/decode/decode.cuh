// Launchers of the generation kernels (decode.cu): state-carrying conv, the gated delta rule continued from a
// recurrent state, KV cache writes and attention of new tokens against the cache (backend.h "generation").
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x, y (T, C); w (C, K); conv_state (nseq, K-1, C) read as history and left as the last K-1 inputs.
cudaError_t launch_conv1d_silu_step(KIn x, KIn w, const int32_t* cu_seqlens, int nseq, KOut conv_state, KOut y,
                                    int64_t C, int K, cudaStream_t s);
// q, k (T, HK, dk); v, o (T, HV, dv); g, beta (T, HV); state F32 (nseq, HV, dk, dv) in/out. dk <= 256.
cudaError_t launch_gdn_recurrent(KIn q, KIn k, KIn v, KIn g, KIn beta, const int32_t* cu_seqlens, int nseq,
                                 float* state, KOut o, int HK, int HV, int dk, int dv, float scale, cudaStream_t s);
// k, v (T, row); caches (nseq, L, row): cache[n, positions[t]] (=) k[t], v[t].
cudaError_t launch_kv_cache_write(KIn k, KIn v, const int32_t* cu_seqlens, int nseq, const int32_t* positions,
                                  KOut k_cache, KOut v_cache, int64_t T, int64_t L, int64_t row, cudaStream_t s);
// q, o (T, nH, hd); caches (nseq, L, nKV, hd); token t of sequence n attends to cache rows 0..positions[t].
cudaError_t launch_attention_cached(KIn q, KIn k_cache, KIn v_cache, const int32_t* cu_seqlens, int nseq,
                                    const int32_t* positions, KOut o, int64_t T, int nH, int nKV, int hd, int64_t L,
                                    float scale, cudaStream_t s);

}  // namespace deltatune::kernels
