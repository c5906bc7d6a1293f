// The GPU module's entry point: the table backend_create() and gpu_environment() use (backend/cuda_module.h).
#include "backend/cuda_module.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/kernel_policy_select.h"
#include "backend/cuda_kernels_setting.h"

namespace deltatune::cuda {
namespace {

std::unique_ptr<Backend> make_backend(int device_index, DType compute, const std::string& kernels) {
  return make_cuda_backend(device_index, compute, kernels);
}

// describe_cuda_device (kernel_policy_select.h): the kernel policy's view of each device.
const CudaModule kModule{kCudaModuleAbi, DT_VERSION, CUDART_VERSION, &make_backend, &describe_cuda_device};

}  // namespace
}  // namespace deltatune::cuda

extern "C" __attribute__((visibility("default"))) const deltatune::CudaModule* deltatune_cuda_module() {
  return &deltatune::cuda::kModule;
}
