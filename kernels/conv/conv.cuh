// Launchers for the depthwise causal conv1d + SiLU with sequence resets (conv1d_silu.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x, y (T, C); w (C, K); cu_seqlens I32 (nseq+1).
cudaError_t launch_conv1d_silu_fwd(KIn x, KIn w, const int32_t* cu_seqlens, int nseq, KOut y, int64_t T, int64_t C,
                                   int K, cudaStream_t s);
// dy, x, dx (T, C); w (C, K).
cudaError_t launch_conv1d_silu_bwd(KIn dy, KIn x, KIn w, const int32_t* cu_seqlens, int nseq, KOut dx, int64_t T,
                                   int64_t C, int K, cudaStream_t s);

}  // namespace deltatune::kernels
