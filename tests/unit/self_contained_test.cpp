// The repository is self-contained: tests, goldens and benchmarks name no folder of the machine they were
// written on (test data outside the repository comes from tests/test_data.h: CMake or the environment), and
// the golden PEFT adapters name their base model the way a clone can resolve (relative, or a Hub id).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "io/files.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DT_SOURCE_DIR;

std::string read_all(const fs::path& p) { return deltatune::read_text_file(p.string()); }

bool is_text(const fs::path& p) {
  static const std::set<std::string> exts = {".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".json", ".md",
                                             ".yaml", ".yml", ".txt", ".jinja", ".cmake"};
  return exts.count(p.extension().string()) > 0 || p.filename() == "CMakeLists.txt";
}

std::vector<fs::path> text_files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && is_text(e.path()) && e.file_size() < (8 << 20)) out.push_back(e.path());
  return out;
}

}  // namespace

TEST(SelfContained, TestsAndBenchmarksNameNoMachineFolder) {
  // A path that starts at one of these folders exists only on the machine that wrote it.
  static const std::regex re(R"((^|[\s"'=(:,])/(work|home|opt|root|mnt|srv|scratch)/[^\s"']*)");
  std::vector<std::string> bad;
  size_t scanned = 0;
  for (const char* top : {"tests", "bench"})
    for (const fs::path& f : text_files_under(kRoot / top)) {
      ++scanned;
      const std::string text = read_all(f);
      std::smatch m;
      if (std::regex_search(text, m, re)) bad.push_back(fs::relative(f, kRoot).string() + ": " + m[0].str());
    }
  EXPECT_GT(scanned, 100u);
  EXPECT_TRUE(bad.empty()) << "absolute paths of one machine (take test data from tests/test_data.h: a CMake cache "
                              "variable or the environment, and skip when it is absent):\n  "
                           << testing::PrintToString(bad);
}

TEST(SelfContained, GoldenAdaptersNameNoAbsoluteBaseModel) {
  std::vector<std::string> bad;
  size_t adapters = 0;
  for (const char* top : {"tests", "resources"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      if (e.path().filename() != "adapter_config.json") continue;
      ++adapters;
      const auto j = nlohmann::json::parse(read_all(e.path()), nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << e.path();
      const auto it = j.find("base_model_name_or_path");
      if (it == j.end() || it->is_null()) continue;
      ASSERT_TRUE(it->is_string()) << e.path();
      if (fs::path(it->get<std::string>()).is_absolute())
        bad.push_back(fs::relative(e.path(), kRoot).string() + ": " + it->get<std::string>());
    }
  EXPECT_GE(adapters, 10u);  // tests/goldens/lora (2) and tests/goldens/peft/fixtures (9)
  EXPECT_TRUE(bad.empty()) << "base_model_name_or_path must be relative or a Hub id (the generators load the base "
                              "model by a relative path; PEFT writes the path it was given):\n  "
                           << testing::PrintToString(bad);
}
