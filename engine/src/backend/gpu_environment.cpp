// gpu_environment(): the driver (asked directly, so this works without the GPU module) joined with the GPU
// module's description of each device (the kernel path it would take).
#include "deltatune/gpu_info.h"

#include "backend/cuda_driver.h"
#include "backend/cuda_module_loader.h"

namespace deltatune {

GpuEnvironment gpu_environment(const std::string& kernels) {
  GpuEnvironment env;
  env.cuda_built = cuda_runtime_needed() != 0;
  CudaDriverInfo driver = probe_cuda_driver();
  env.driver_version = driver.api_version;
  env.driver_release = driver.release;
  env.devices = std::move(driver.devices);
  if (!env.cuda_built) {
    env.problem = cuda_not_built_problem();
    return env;
  }
  // The module is loaded even without a driver, so `deltatune info` shows whether it and cuBLAS are in place.
  const CudaModuleLoad& module = cuda_module();
  env.module_path = module.path;
  if (module.module) env.runtime_version = module.module->runtime_version;
  for (GpuDevice& d : env.devices)
    if (module.module) module.module->describe_device(d, kernels);
  env.problem = driver.problem;
  if (!module.problem.empty()) env.problem += (env.problem.empty() ? "" : "; and ") + module.problem;
  env.runtime_loaded = env.problem.empty();
  return env;
}

}  // namespace deltatune
