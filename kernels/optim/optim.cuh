// Launchers for the optimizer updates (optim.cu). Params and moments F32; grad any float type.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// torch.optim.AdamW's fp32 update with host-formed scalars (engine/src/backend/adamw_scalars.h):
// p ← p·decay (if weight decay); m ← lerp(m, g, lerp_w); v ← v·b2 + omb2·g²;
// p ← p + neg_step·m / (sqrt(v)/bc2_sqrt + eps).
cudaError_t launch_adamw(float* param, KIn grad, float* m, float* v, int64_t n, float decay, bool weight_decay,
                         float lerp_w, float b2, float omb2, float neg_step, float bc2_sqrt, float eps,
                         cudaStream_t s);
// The same update for `count` F32 tensors (param[i], grad[i], m[i], v[i] of n[i] elements) in a few launches,
// each gradient read as grad_scale·grad (clipping).
cudaError_t launch_adamw_many(float* const* param, const float* const* grad, float* const* m, float* const* v,
                              const int64_t* n, int count, float grad_scale, float decay, bool weight_decay,
                              float lerp_w, float b2, float omb2, float neg_step, float bc2_sqrt, float eps,
                              cudaStream_t s);
cudaError_t launch_sgd(float* param, KIn grad, int64_t n, float lr, float weight_decay, cudaStream_t s);

}  // namespace deltatune::kernels
