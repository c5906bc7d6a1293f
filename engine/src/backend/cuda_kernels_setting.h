// The CUDA backend for a given `kernels` setting (the run config's key: "auto" | "portable"; see
// kernels/common/kernel_policy.h). make_cuda_backend(device, compute) (backend.h) is this with "auto".
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace deltatune {

std::unique_ptr<Backend> make_cuda_backend(int device_index, DType compute, const std::string& kernels);

}  // namespace deltatune
