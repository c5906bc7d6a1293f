// Launcher for partial NeoX rotary embedding, in place (rope.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x (T, heads, hd) in place; positions I32 (T).
cudaError_t launch_rope(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, int rot_dim,
                        float theta, bool inverse, cudaStream_t s);

}  // namespace deltatune::kernels
