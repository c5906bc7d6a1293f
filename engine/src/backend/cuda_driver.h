// The NVIDIA driver as found at run time (libcuda.so.1, libnvidia-ml.so.1), without the CUDA toolkit: the
// CUDA version it supports, its release and the GPUs it sees. Nothing here includes a CUDA header.
#pragma once
#include <string>
#include <vector>

#include "deltatune/gpu_info.h"

namespace deltatune {

struct CudaDriverInfo {
  bool usable = false;   // libcuda.so.1 loaded, new enough, cuInit succeeded and at least one GPU
  int api_version = 0;   // cuDriverGetVersion (13000 = CUDA 13.0); 0 without a driver
  std::string release;   // "580.95.05" from NVML; "" when NVML is missing
  std::string problem;   // one line: why the GPU cannot be used, and what to install
  std::vector<GpuDevice> devices;  // index, name, compute capability, SMs, shared memory, total/free memory
};

// Asks the driver now (cheap: no CUDA context is created; free memory comes from NVML).
CudaDriverInfo probe_cuda_driver();

// The CUDA version this build's GPU module needs (e.g. 13000), 0 in a build without CUDA.
int cuda_runtime_needed();
// "580" for CUDA 13: the oldest driver release that runs the GPU module's CUDA runtime (root CMakeLists.txt).
std::string min_driver_release();
// "13.0" from 13000.
std::string cuda_version_str(int version);

// What to install so that the GPU backend finds a driver: the oldest driver release and its CUDA version; in a
// build without CUDA, cuda_not_built_problem() instead (no driver gives that build a GPU backend).
std::string driver_install_hint();
// One line for every path that would use the GPU in a build without CUDA: what is missing and how to get it.
std::string cuda_not_built_problem();

}  // namespace deltatune
