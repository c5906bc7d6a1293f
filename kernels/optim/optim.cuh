// Launchers for the optimizer updates (optim.cu). Params and moments F32; grad any float type.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// bc1 = 1 − β1^step, bc2 = 1 − β2^step (host-computed in fp64).
cudaError_t launch_adamw(float* param, KIn grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float bc1, float bc2, cudaStream_t s);
cudaError_t launch_sgd(float* param, KIn grad, int64_t n, float lr, float weight_decay, cudaStream_t s);

}  // namespace deltatune::kernels
