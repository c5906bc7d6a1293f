#include "train/backend_select.h"

#include "backend/cuda_driver.h"
#include "backend/cuda_module_loader.h"
#include "core/error.h"

namespace deltatune {

namespace {
// Why the GPU backend cannot run here ("" when it can). The driver is asked first, so a machine without
// one never maps the GPU module and cuBLAS.
std::string cuda_problem() {
  const CudaDriverInfo driver = probe_cuda_driver();
  if (!driver.usable) return driver.problem;
  return cuda_module().problem;
}
}  // namespace

std::unique_ptr<Backend> backend_create(const std::string& name, int gpu, std::string* note) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
    if (const std::string problem = cuda_problem(); !problem.empty()) throw Error("backend cuda: " + problem);
    return cuda_module().module->make_backend(gpu, DType::BF16);
  }
  if (name == "auto" || name.empty()) {
    const std::string problem = cuda_problem();
    if (problem.empty()) return cuda_module().module->make_backend(gpu, DType::BF16);
    if (note) *note = "auto: no GPU backend here: " + problem;
    return make_cpu_backend();
  }
  throw Error("backend: unknown backend '" + name + "' (expected auto, cpu or cuda)");
}

}  // namespace deltatune
