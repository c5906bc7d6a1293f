// Every launcher that takes a KernelPolicy asks for a kernel's dynamic shared memory through this: a request
// over the policy's limit (the device's opt-in shared memory per block, or less where a test says so) is
// refused before anything launches, so no launch depends on more than the device reported.
#pragma once
#include <cuda_runtime.h>

#include "common/kernel_policy.h"

namespace deltatune::kernels {

template <class Kernel>
inline cudaError_t set_launch_smem(const KernelPolicy& pol, Kernel* kernel, size_t bytes) {
  if (bytes > pol.smem_optin) return cudaErrorInvalidConfiguration;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace deltatune::kernels
