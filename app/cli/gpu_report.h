// The GPU part of `deltatune info`: driver, CUDA runtime, GPU module and each GPU with its kernel path, or
// the one line saying what to install.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "deltatune/gpu_info.h"

namespace deltatune::cli {

std::string gpu_report_text(const GpuEnvironment& env);
nlohmann::ordered_json gpu_report_json(const GpuEnvironment& env);

}  // namespace deltatune::cli
