// Launcher for partial NeoX rotary embedding, in place (rope.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x (T, heads, hd) in place; positions I32 (T).
cudaError_t launch_rope(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, int rot_dim,
                        float theta, bool inverse, cudaStream_t s);

// Qwen3.5's interleaved multimodal RoPE: positions I32 (3, T) (temporal, height, width rows); frequency slot i
// takes row 1 when i % 3 == 1 and i < 3·section_h, row 2 when i % 3 == 2 and i < 3·section_w, else row 0.
cudaError_t launch_rope_multimodal(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd,
                                   int rot_dim, float theta, int section_h, int section_w, bool inverse,
                                   cudaStream_t s);

}  // namespace deltatune::kernels
