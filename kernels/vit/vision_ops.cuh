// Launchers for the vision tower's own ops (vision_ops.cu): LayerNorm, GELU (tanh / erf) and the 2-D rotary.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x, y (rows, n); w, b (n); mean, rstd F32 (rows) (=).
cudaError_t launch_layer_norm_fwd(KIn x, KIn w, KIn b, float eps, KOut y, float* mean, float* rstd, int64_t rows,
                                  int64_t n, cudaStream_t s);
// dy, x, dx (rows, n); w (n); mean, rstd F32 (rows).
cudaError_t launch_layer_norm_bwd(KIn dy, KIn x, KIn w, const float* mean, const float* rstd, KOut dx, int64_t rows,
                                  int64_t n, cudaStream_t s);
// y (=) gelu(x) / dx (=) dy·gelu'(x), n elements.
cudaError_t launch_gelu_fwd(KIn x, bool tanh_approx, KOut y, int64_t n, cudaStream_t s);
cudaError_t launch_gelu_bwd(KIn dy, KIn x, bool tanh_approx, KOut dx, int64_t n, cudaStream_t s);
// x (T, heads, hd) in place, positions I32 (2, T) (row, column); see Backend::rope_2d.
cudaError_t launch_rope_2d(KOut x, const int32_t* positions, int64_t T, int64_t heads, int64_t hd, float theta,
                           bool inverse, cudaStream_t s);

}  // namespace deltatune::kernels
