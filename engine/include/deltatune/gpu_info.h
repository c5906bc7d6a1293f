// What this machine offers for training on NVIDIA GPUs: the driver and CUDA runtime the engine found, and
// each GPU with the kernel path the engine would use on it. Shown by `deltatune info` and the studio's GPU
// picker; also used to resolve `gpus: all` and to refuse a GPU before a run starts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

struct GpuDevice {
  int index = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::string arch;                // "sm_90"
  int sm_count = 0;
  int64_t shared_memory_per_block_optin = 0;  // bytes
  int64_t total_bytes = 0, free_bytes = 0;  // free_bytes: 0 when unknown (no NVML)
  // "hopper" (wgmma, TMA) | "portable" (mma.sync, cp.async) | "" when the GPU is not supported.
  std::string kernel_path;
  bool supported = false;
  std::string problem;  // one line naming the GPU, its compute capability and what is supported
};

struct GpuEnvironment {
  bool cuda_built = false;       // this build carries the CUDA backend
  bool runtime_loaded = false;   // the driver and the CUDA libraries were found and loaded
  int driver_version = 0;        // CUDA driver API version (e.g. 13000), 0 when there is no driver
  std::string driver_release;    // the driver's release ("580.95.05"), "" when unknown
  int runtime_version = 0;       // CUDA runtime the backend was built with (0 when its module did not load)
  std::string module_path;       // the GPU backend module loaded or tried (lib/deltatune/libdeltatune-cuda.so)
  std::string problem;           // one line: why the GPU backend cannot run here, and what to install
  std::vector<GpuDevice> devices;
};

// Never throws: a machine without a driver gives runtime_loaded = false and a `problem` line.
// `kernels`: the run config's `kernels` setting ("auto" | "portable"), which decides `kernel_path`.
GpuEnvironment gpu_environment(const std::string& kernels = "auto");

}  // namespace deltatune
