#include "gpu_report.h"

#include <cstdio>
#include <sstream>

namespace deltatune::cli {

namespace {
std::string version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
  return buf;
}
}  // namespace

std::string gpu_report_text(const GpuEnvironment& env) {
  std::ostringstream o;
  o << "GPU:\n";
  o << "  NVIDIA driver: "
    << (env.driver_version ? (env.driver_release.empty() ? "" : env.driver_release + ", ") + "CUDA " +
                                 version_str(env.driver_version)
                           : "none")
    << "\n";
  if (env.cuda_built)
    o << "  CUDA runtime: "
      << (env.runtime_version ? version_str(env.runtime_version) + " (" + env.module_path + ")"
                              : "not loaded (" + env.module_path + ")")
      << "\n";
  for (const GpuDevice& d : env.devices) {
    o << "  GPU " << d.index << ": " << d.name << ", " << d.arch << ", " << d.sm_count << " SMs, "
      << gib(d.total_bytes) << (d.free_bytes ? " (" + gib(d.free_bytes) + " free)" : "");
    if (!d.kernel_path.empty()) o << ", kernels: " << d.kernel_path;
    o << "\n";
    if (!d.problem.empty()) o << "    " << d.problem << "\n";
  }
  o << (env.runtime_loaded ? "  backend auto: GPU\n" : "  backend auto: CPU, because " + env.problem + "\n");
  return o.str();
}

nlohmann::ordered_json gpu_report_json(const GpuEnvironment& env) {
  nlohmann::ordered_json j;
  j["cuda_built"] = env.cuda_built;
  j["runtime_loaded"] = env.runtime_loaded;
  j["driver_version"] = env.driver_version;
  j["driver_release"] = env.driver_release;
  j["runtime_version"] = env.runtime_version;
  j["module_path"] = env.module_path;
  j["problem"] = env.problem;
  j["devices"] = nlohmann::ordered_json::array();
  for (const GpuDevice& d : env.devices)
    j["devices"].push_back({{"index", d.index},
                            {"name", d.name},
                            {"arch", d.arch},
                            {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                            {"sm_count", d.sm_count},
                            {"shared_memory_per_block_optin", d.shared_memory_per_block_optin},
                            {"total_bytes", d.total_bytes},
                            {"free_bytes", d.free_bytes},
                            {"kernel_path", d.kernel_path},
                            {"supported", d.supported},
                            {"problem", d.problem}});
  return j;
}

}  // namespace deltatune::cli
