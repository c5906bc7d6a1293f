#include "train/backend_select.h"

#include "backend/cuda_driver.h"
#include "backend/cuda_module_loader.h"
#include "core/error.h"

namespace deltatune {

namespace {
// Why the GPU backend cannot run on device `gpu` here ("" when it can). A build without CUDA says so before
// anything about the driver (no driver would help it). Then the driver is asked, so a machine without one never
// maps the GPU module and cuBLAS; then the module's kernel policy judges the GPU (one line naming it, its
// compute capability and what is supported).
std::string cuda_problem(int gpu, const std::string& kernels) {
  if (cuda_runtime_needed() == 0) return cuda_not_built_problem();
  CudaDriverInfo driver = probe_cuda_driver();
  if (!driver.usable) return driver.problem;
  if (!cuda_module().problem.empty()) return cuda_module().problem;
  for (GpuDevice& d : driver.devices)
    if (d.index == gpu) {
      cuda_module().module->describe_device(d, kernels);
      return d.problem;
    }
  return "";  // an index out of range: the backend names it
}
}  // namespace

std::unique_ptr<Backend> backend_create(const std::string& name, int gpu, std::string* note,
                                        const std::string& kernels) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
    if (const std::string problem = cuda_problem(gpu, kernels); !problem.empty())
      throw Error("backend cuda: " + problem);
    return cuda_module().module->make_backend(gpu, DType::BF16, kernels);
  }
  if (name == "auto" || name.empty()) {
    const std::string problem = cuda_problem(gpu, kernels);
    if (problem.empty()) return cuda_module().module->make_backend(gpu, DType::BF16, kernels);
    if (note) *note = "auto: no GPU backend here: " + problem;
    return make_cpu_backend();
  }
  throw Error("backend: unknown backend '" + name + "' (expected auto, cpu or cuda)");
}

}  // namespace deltatune
