// `deltatune demo` end to end: a short CPU run whose step lines carry the time left, writing into the
// current folder and never into the bundled demo folder.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.insert(fs::relative(e.path(), dir).string());
  return out;
}

}  // namespace

TEST(CliDemo, StepLinesShowTheTimeLeftAndTheDemoFolderStaysUntouched) {
  const fs::path demo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";
  const std::set<std::string> before = files_under(demo);
  const fs::path dir = fs::temp_directory_path() / ("dt_cli_demo_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = "cd '" + dir.string() + "' && DELTATUNE_DEMO_DIR='" + demo.string() + "' '" +
                          DT_CLI_PATH + "' demo --backend cpu --max-steps 3 --db '" + (dir / "e.db").string() +
                          "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const int status = pclose(f);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;

  // Every step line ends with "ETA <duration>"; the last one with nothing left.
  static const std::regex step_line(R"(^step (\d+)/3 .* ETA (\d+s|\d+m\d\ds|\d+h\d\dm)$)");
  std::istringstream in(out);
  std::string line, last_eta;
  int steps = 0;
  while (std::getline(in, line)) {
    if (line.rfind("step ", 0) != 0) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, step_line)) << line;
    ++steps;
    last_eta = m[2];
  }
  EXPECT_EQ(steps, 3) << out;
  EXPECT_EQ(last_eta, "0s") << out;

  EXPECT_TRUE(fs::exists(dir / "runs" / "demo" / "adapter_model.safetensors")) << out;
  EXPECT_EQ(files_under(demo), before) << "the demo run wrote into " << demo;
  fs::remove_all(dir);
}
