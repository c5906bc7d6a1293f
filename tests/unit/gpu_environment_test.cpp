// The GPU runtime as seen from a machine without a usable NVIDIA driver (CI): the CPU backend still trains,
// and every path says what to install. On a machine with a driver the driver-dependent checks are skipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cuda_driver.h"
#include "core/error.h"
#include "deltatune/gpu_info.h"
#include "deltatune/program_path.h"
#include "train/backend_select.h"

namespace deltatune {
namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  pclose(f);
  return out;
}

TEST(GpuEnvironment, WithoutDriverAutoTakesTheCpuAndCudaSaysWhatToInstall) {
  if (probe_cuda_driver().usable) GTEST_SKIP() << "this machine has a usable NVIDIA driver";
  const GpuEnvironment env = gpu_environment();
  EXPECT_FALSE(env.runtime_loaded);
  EXPECT_FALSE(env.problem.empty());
  std::string note;
  auto be = backend_create("auto", 0, &note);
  EXPECT_EQ(be->device(), Device::CPU);
  EXPECT_NE(note.find(probe_cuda_driver().problem), std::string::npos) << note;
  try {
    backend_create("cuda");
    FAIL() << "backend cuda started without a driver";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("driver"), std::string::npos) << e.what();
  }
  if (env.cuda_built && env.driver_version == 0)
    EXPECT_NE(env.problem.find("NVIDIA driver " + min_driver_release() + " or newer"), std::string::npos)
        << env.problem;
}

TEST(ProgramPath, NamesThisProgram) { EXPECT_EQ(program_path().filename(), "dt_unit_tests"); }

// Started through the dynamic loader (as the package check does), the CLI still finds its GPU module
// beside it (build/app -> build/lib/deltatune), not beside the loader.
TEST(ProgramPath, CliThroughTheLoaderFindsItsGpuModule) {
  if (!gpu_environment().cuda_built) GTEST_SKIP() << "built without CUDA";
  const std::string out = run("/lib64/ld-linux-x86-64.so.2 " + std::string(DT_CLI_PATH) + " info --json 2>/dev/null");
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["gpu"]["module_path"], std::string(DT_BINARY_DIR) + "/lib/deltatune/libdeltatune-cuda.so") << out;
}

}  // namespace
}  // namespace deltatune
