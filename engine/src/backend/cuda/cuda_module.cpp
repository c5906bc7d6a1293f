// The GPU module's entry point: the table backend_create() and gpu_environment() use (backend/cuda_module.h).
#include "backend/cuda_module.h"

#include <cuda_runtime_api.h>

namespace deltatune::cuda {
namespace {

void describe_device(GpuDevice& d, const std::string& kernels) {
  // The CUDA backend needs bf16 tensor cores (compute capability 8.0). The kernel path per device comes
  // from the kernel policy (issue 28), which fills `kernel_path` here once it lands.
  d.supported = d.cc_major >= 8;
  d.problem = d.supported ? "" : d.name + " has compute capability " + std::to_string(d.cc_major) + "." +
                                     std::to_string(d.cc_minor) + "; DeltaTune's GPU backend needs 8.0 or newer";
}

std::unique_ptr<Backend> make_backend(int device_index, DType compute) {
  return make_cuda_backend(device_index, compute);
}

const CudaModule kModule{kCudaModuleAbi, DT_VERSION, CUDART_VERSION, &make_backend, &describe_device};

}  // namespace
}  // namespace deltatune::cuda

extern "C" __attribute__((visibility("default"))) const deltatune::CudaModule* deltatune_cuda_module() {
  return &deltatune::cuda::kModule;
}
