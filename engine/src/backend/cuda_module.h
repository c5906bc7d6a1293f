// The CUDA backend is a module loaded at run time (libdeltatune-cuda.so, in the private library folder
// lib/deltatune beside bin/), so the programs start and train on the CPU on machines without CUDA. This is
// the table the module hands the engine; the engine never calls a CUDA function directly.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "deltatune/gpu_info.h"

namespace deltatune {

// Raised whenever the table changes shape, so a module from another build is refused instead of crashing.
inline constexpr int kCudaModuleAbi = 2;
inline constexpr const char* kCudaModuleEntry = "deltatune_cuda_module";  // extern "C" entry point
inline constexpr const char* kCudaModuleFile = "libdeltatune-cuda.so";

struct CudaModule {
  int abi = kCudaModuleAbi;
  const char* engine_version = "";  // DT_VERSION of the build that made the module
  int runtime_version = 0;          // CUDART_VERSION of the CUDA runtime linked into it (statically)
  // kernels: the run config's `kernels` setting ("auto" | "portable"), which picks the kernel policy.
  std::unique_ptr<Backend> (*make_backend)(int device_index, DType compute,
                                           const std::string& kernels) = nullptr;
  // Fills `arch`, `kernel_path`, `supported` and `problem` of a device whose index, name and compute
  // capability are already set, for the run config's `kernels` setting ("auto" | "portable").
  void (*describe_device)(GpuDevice& device, const std::string& kernels) = nullptr;
};

}  // namespace deltatune

// Defined by the module (and by test programs that link the CUDA backend statically).
extern "C" const deltatune::CudaModule* deltatune_cuda_module();
