#include "backend/cuda/kernel_policy_select.h"

#include "core/error.h"

namespace deltatune::cuda {

namespace {
// Compute capabilities this binary is built for (CMAKE_CUDA_ARCHITECTURES; README, GPU section).
constexpr const char* kSupported =
    "compute capability 8.0 or newer (A100, RTX 30xx/A-series, RTX 40xx/Ada, "
    "H100/H200, B200, RTX 50xx/RTX PRO Blackwell)";

kernels::KernelPath path_for(int cc_major, int cc_minor, bool portable) {
  const bool hopper = cc_major == 9 && cc_minor == 0 && kernels::kernels_built_for_hopper() && !portable;
  return hopper ? kernels::KernelPath::Hopper : kernels::KernelPath::Portable;
}
}  // namespace

bool kernels_setting_portable(const std::string& kernels) {
  if (kernels == "auto" || kernels.empty()) return false;
  if (kernels == "portable") return true;
  throw Error("kernels: '" + kernels + "' is not valid (expected one of auto, portable)");
}

std::string unsupported_gpu_line(const std::string& name, int cc_major, int cc_minor) {
  if (cc_major >= 8) return "";
  return "GPU " + name + " has compute capability " + std::to_string(cc_major) + "." +
         std::to_string(cc_minor) + "; DeltaTune's CUDA backend supports " + kSupported +
         " (train with `backend: cpu`)";
}

kernels::KernelPolicy choose_kernel_policy(const cudaDeviceProp& prop, const std::string& kernels) {
  const bool portable = kernels_setting_portable(kernels);
  if (const std::string line = unsupported_gpu_line(prop.name, prop.major, prop.minor); !line.empty())
    throw Error(line);
  kernels::KernelPolicy p;
  p.path = path_for(prop.major, prop.minor, portable);
  p.cc_major = prop.major, p.cc_minor = prop.minor;
  p.sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  p.smem_optin = prop.sharedMemPerBlockOptin;
  return p;
}

void describe_cuda_device(GpuDevice& d, const std::string& kernels) {  // never throws (gpu_environment)
  d.arch = "sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
  d.problem = unsupported_gpu_line(d.name, d.cc_major, d.cc_minor);
  d.supported = d.problem.empty();
  if (!d.supported) {
    d.kernel_path.clear();
    return;
  }
  const bool hopper =
      path_for(d.cc_major, d.cc_minor, kernels == "portable") == kernels::KernelPath::Hopper;
  d.kernel_path = hopper ? "hopper" : "portable";
}

}  // namespace deltatune::cuda
