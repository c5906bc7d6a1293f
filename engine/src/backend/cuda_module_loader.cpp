#include "backend/cuda_module_loader.h"

#include <dlfcn.h>
#include <filesystem>

#include "backend/cuda_driver.h"
#include "deltatune/program_path.h"

namespace deltatune {

namespace {

std::string libs_hint() {
  const int need = cuda_runtime_needed();
  return "install the package deltatune-cuda-libs (NVIDIA's cuBLAS and NCCL for CUDA " + std::to_string(need / 1000) +
         " for DeltaTune) or NVIDIA's libcublas-" + std::to_string(need / 1000) + "-" +
         std::to_string(need % 1000 / 10) + " from the CUDA repository";
}

CudaModuleLoad load() {
  CudaModuleLoad out;
  using Entry = const CudaModule* (*)();
  // Test programs link the CUDA backend in and export its entry point.
  if (auto entry = reinterpret_cast<Entry>(dlsym(RTLD_DEFAULT, kCudaModuleEntry))) {
    out.module = entry();
    out.path = "built in";
    return out;
  }
  if (cuda_runtime_needed() == 0) {
    out.problem = cuda_not_built_problem();
    return out;
  }
  const std::filesystem::path dir = program_path().parent_path();
  out.path = (dir.parent_path() / "lib" / "deltatune" / kCudaModuleFile).string();
  if (!std::filesystem::exists(out.path)) {
    out.problem = "the GPU backend module " + out.path + " is missing (reinstall the deltatune package)";
    return out;
  }
  // RTLD_NOW: a missing library or symbol shows here, with its name, not in the middle of a run. The
  // module finds cuBLAS through its RUNPATH ($ORIGIN, the private folder) or the system's library path.
  void* lib = dlopen(out.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const std::string why = dlerror();
    out.problem = "the GPU backend module cannot load (" + why + ")";
    if (why.find("libcublas") != std::string::npos || why.find("libnccl") != std::string::npos)
      out.problem += ": " + libs_hint();
    return out;
  }
  auto entry = reinterpret_cast<Entry>(dlsym(lib, kCudaModuleEntry));
  const CudaModule* m = entry ? entry() : nullptr;
  if (!m || m->abi != kCudaModuleAbi || std::string(m->engine_version) != DT_VERSION) {
    out.problem = "the GPU backend module " + out.path + " is from another DeltaTune build (reinstall the package)";
    return out;
  }
  out.module = m;
  return out;
}

}  // namespace

const CudaModuleLoad& cuda_module() {
  static const CudaModuleLoad loaded = load();  // dlopen once per process; the module stays loaded
  return loaded;
}

}  // namespace deltatune
