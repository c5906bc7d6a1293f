// The one place that decides which kernels run on a device (kernels/common/kernel_policy.h): from its
// compute capability, SM count and opt-in shared memory per block, and the run config's `kernels` setting.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "common/kernel_policy.h"
#include "deltatune/gpu_info.h"

namespace deltatune::cuda {

// "auto" -> false, "portable" -> true; anything else throws Error naming the `kernels` key.
bool kernels_setting_portable(const std::string& kernels);

// The policy for a device; throws Error with unsupported_gpu_line() for a GPU below compute capability 8.0.
// Hopper: compute capability 9.0, a binary with sm_90a code and `kernels: auto`; else Portable.
kernels::KernelPolicy choose_kernel_policy(const cudaDeviceProp& prop, const std::string& kernels);

// One line naming the GPU, its compute capability and what is supported ("" when it is supported).
std::string unsupported_gpu_line(const std::string& name, int cc_major, int cc_minor);

// Fills `arch`, `kernel_path`, `supported` and `problem` of a device whose name and compute capability are
// set (gpu_environment()'s per-device description).
void describe_cuda_device(GpuDevice& d, const std::string& kernels);

}  // namespace deltatune::cuda
