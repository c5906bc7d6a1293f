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
  // A build without CUDA names what it lacks, whatever the driver; a CUDA build names the driver.
  const std::string why = env.cuda_built ? probe_cuda_driver().problem : cuda_not_built_problem();
  std::string note;
  auto be = backend_create("auto", 0, &note);
  EXPECT_EQ(be->device(), Device::CPU);
  EXPECT_NE(note.find(why), std::string::npos) << note;
  try {
    backend_create("cuda");
    FAIL() << "backend cuda started without a driver";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(env.cuda_built ? "driver" : "-DDT_CUDA=ON"), std::string::npos) << e.what();
  }
  if (env.cuda_built && env.driver_version == 0)
    EXPECT_NE(env.problem.find("NVIDIA driver " + min_driver_release() + " or newer"), std::string::npos)
        << env.problem;
}

// What to install, as this build needs it: a CUDA build names the driver release and CUDA version it needs; a
// build without CUDA has neither to name (it once said "install the NVIDIA driver  or newer (CUDA 0.0)") and
// says that it has no GPU backend and how to get one, on every path that would use the GPU.
TEST(GpuEnvironment, DriverHintIsTrueForThisBuild) {
  const std::string hint = driver_install_hint();
  if (cuda_runtime_needed() != 0) {
    EXPECT_FALSE(min_driver_release().empty());
    EXPECT_NE(hint.find("install the NVIDIA driver " + min_driver_release() + " or newer (CUDA " +
                        cuda_version_str(cuda_runtime_needed()) + ")"),
              std::string::npos)
        << hint;
    return;
  }
  EXPECT_EQ(hint, cuda_not_built_problem());
  for (const std::string& text : {hint, probe_cuda_driver().problem, gpu_environment().problem}) {
    EXPECT_EQ(text.find("CUDA 0.0"), std::string::npos) << text;
    EXPECT_EQ(text.find("driver  or"), std::string::npos) << text;
  }
  EXPECT_NE(hint.find("no GPU backend"), std::string::npos) << hint;
  EXPECT_NE(hint.find("built without CUDA"), std::string::npos) << hint;
  EXPECT_NE(hint.find("-DDT_CUDA=ON"), std::string::npos) << hint;
  EXPECT_EQ(gpu_environment().problem, cuda_not_built_problem());
  if (!probe_cuda_driver().usable)
    EXPECT_NE(probe_cuda_driver().problem.find(cuda_not_built_problem()), std::string::npos);
  try {
    backend_create("cuda");
    FAIL() << "backend cuda started in a build without CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "backend cuda: " + cuda_not_built_problem());
  }
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
