#include "backend/cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace deltatune {

namespace {

// The few driver-API and NVML declarations we call, as in cuda.h / nvml.h (values checked against CUDA 13.0).
using CUresult = int;
using CUdevice = int;
constexpr int kAttrSmCount = 16;       // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrCcMajor = 75;       // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;       // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kAttrSmemOptin = 97;     // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr CUresult kErrorNoDevice = 100;  // CUDA_ERROR_NO_DEVICE
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlDevice = void*;

template <typename F>
F sym(void* lib, const char* name) {
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

std::string release_from_nvml(void* nvml) {
  auto get = sym<int (*)(char*, unsigned)>(nvml, "nvmlSystemGetDriverVersion");
  char buf[96] = {};
  return get && get(buf, sizeof buf) == 0 ? std::string(buf) : std::string();
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu ..." -> "580.95.05"
std::string release_from_proc() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return {};
  const auto at = line.find("Kernel Module");
  if (at == std::string::npos) return {};
  std::istringstream rest(line.substr(at + 13));
  std::string release;
  rest >> release;
  return release;
}

std::string cu_error(void* cuda, CUresult r) {
  auto name = sym<CUresult (*)(CUresult, const char**)>(cuda, "cuGetErrorName");
  const char* s = nullptr;
  if (name && name(r, &s) == 0 && s) return s;
  return "CUresult " + std::to_string(r);
}

}  // namespace

std::string driver_install_hint() {
  // A build without CUDA needs no particular driver (no release or CUDA version to name): a driver alone
  // would not give it a GPU backend.
  if (cuda_runtime_needed() == 0) return cuda_not_built_problem();
  return "install the NVIDIA driver " + min_driver_release() + " or newer (CUDA " +
         cuda_version_str(cuda_runtime_needed()) + "); the CPU backend works without it";
}

std::string cuda_not_built_problem() {
  return "this build of DeltaTune has no GPU backend (it was built without CUDA: DT_CUDA=OFF or no nvcc): for "
         "a GPU, install a DeltaTune package built with CUDA or configure with -DDT_CUDA=ON on a machine with "
         "nvcc; the CPU backend works without it";
}

int cuda_runtime_needed() {
#ifdef DT_CUDA_RUNTIME_VERSION
  return DT_CUDA_RUNTIME_VERSION;
#else
  return 0;
#endif
}

std::string min_driver_release() {
#ifdef DT_MIN_DRIVER_RELEASE
  return DT_MIN_DRIVER_RELEASE;
#else
  return "";
#endif
}

std::string cuda_version_str(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

CudaDriverInfo probe_cuda_driver() {
  CudaDriverInfo info;
  // Loaded once and kept: the driver library is never unloaded while a CUDA runtime may use it.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto nvml_init = sym<int (*)()>(nvml, "nvmlInit_v2");
  auto nvml_shutdown = sym<int (*)()>(nvml, "nvmlShutdown");
  const bool nvml_up = nvml_init && nvml_shutdown && nvml_init() == 0;
  info.release = nvml_up ? release_from_nvml(nvml) : std::string();
  if (info.release.empty()) info.release = release_from_proc();

  auto finish = [&](std::string problem) {
    if (nvml_up) nvml_shutdown();
    info.problem = std::move(problem);
    info.usable = info.problem.empty();
    return info;
  };
  if (!cuda)
    return finish("no NVIDIA driver found (libcuda.so.1 is not installed): " + driver_install_hint());
  auto get_version = sym<CUresult (*)(int*)>(cuda, "cuDriverGetVersion");
  if (!get_version || get_version(&info.api_version) != 0)
    return finish("the NVIDIA driver library libcuda.so.1 does not answer cuDriverGetVersion: " +
                  driver_install_hint());
  const int need = cuda_runtime_needed();
  const std::string release = info.release.empty() ? "" : " " + info.release;
  if (info.api_version < need)
    return finish("the NVIDIA driver" + release + " supports CUDA " + cuda_version_str(info.api_version) +
                  ", too old for DeltaTune's GPU backend (CUDA " + cuda_version_str(need) +
                  "): " + driver_install_hint());

  auto init = sym<CUresult (*)(unsigned)>(cuda, "cuInit");
  auto count = sym<CUresult (*)(int*)>(cuda, "cuDeviceGetCount");
  auto get = sym<CUresult (*)(CUdevice*, int)>(cuda, "cuDeviceGet");
  auto name = sym<CUresult (*)(char*, int, CUdevice)>(cuda, "cuDeviceGetName");
  auto attr = sym<CUresult (*)(int*, int, CUdevice)>(cuda, "cuDeviceGetAttribute");
  auto total = sym<CUresult (*)(size_t*, CUdevice)>(cuda, "cuDeviceTotalMem_v2");
  auto bus_id = sym<CUresult (*)(char*, int, CUdevice)>(cuda, "cuDeviceGetPCIBusId");
  if (!init || !count || !get || !name || !attr || !total || !bus_id)
    return finish("the NVIDIA driver library libcuda.so.1 lacks a driver API function: " + driver_install_hint());
  if (const CUresult r = init(0); r != 0)
    return finish(r == kErrorNoDevice ? "the NVIDIA driver" + release + " sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE)"
                                      : "the NVIDIA driver" + release + " failed to start (cuInit: " +
                                            cu_error(cuda, r) + "); check it with nvidia-smi");
  int n = 0;
  if (const CUresult r = count(&n); r != 0)
    return finish("cuDeviceGetCount failed (" + cu_error(cuda, r) + "); check the driver with nvidia-smi");
  if (n == 0) return finish("the NVIDIA driver" + release + " sees no GPU");

  auto nvml_by_bus = sym<int (*)(const char*, NvmlDevice*)>(nvml, "nvmlDeviceGetHandleByPciBusId_v2");
  auto nvml_memory = sym<int (*)(NvmlDevice, NvmlMemory*)>(nvml, "nvmlDeviceGetMemoryInfo");
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    if (get(&dev, i) != 0) continue;
    GpuDevice d;
    d.index = i;
    char buf[256] = {};
    if (name(buf, sizeof buf, dev) == 0) d.name = buf;
    int v = 0;
    if (attr(&v, kAttrCcMajor, dev) == 0) d.cc_major = v;
    if (attr(&v, kAttrCcMinor, dev) == 0) d.cc_minor = v;
    if (attr(&v, kAttrSmCount, dev) == 0) d.sm_count = v;
    if (attr(&v, kAttrSmemOptin, dev) == 0) d.shared_memory_per_block_optin = v;
    size_t bytes = 0;
    if (total(&bytes, dev) == 0) d.total_bytes = static_cast<int64_t>(bytes);
    char bus[64] = {};
    NvmlDevice h = nullptr;
    NvmlMemory mem{};
    if (nvml_up && nvml_by_bus && nvml_memory && bus_id(bus, sizeof bus, dev) == 0 && nvml_by_bus(bus, &h) == 0 &&
        nvml_memory(h, &mem) == 0)
      d.free_bytes = static_cast<int64_t>(mem.free);
    char arch[16];
    std::snprintf(arch, sizeof arch, "sm_%d%d", d.cc_major, d.cc_minor);
    d.arch = arch;
    info.devices.push_back(std::move(d));
  }
  return finish("");
}

}  // namespace deltatune
