// The vision goldens (tests/goldens/vision) as the CPU vision tests read them, and a per-test scratch folder with a
// run config over the tiny vision-language checkpoint.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deltatune/run_config.h"

namespace deltatune::testing_vision {

inline const std::filesystem::path kVision = std::filesystem::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";
inline const std::filesystem::path kModel = kVision / "model";

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// One JSON object per non-empty line.
inline std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// chat_rows.jsonl with its file:// placeholder pointing at this checkout's goldens.
inline std::string golden_rows_text() {
  std::string text = read_file(kVision / "chat_rows.jsonl");
  const std::string mark = "@VISION_GOLDENS@";
  for (size_t at; (at = text.find(mark)) != std::string::npos;) text.replace(at, mark.size(), kVision.string());
  return text;
}

// A fresh folder under the build's test_tmp named after the test, removed afterwards.
class VisionScratch : public ::testing::Test {
 protected:
  explicit VisionScratch(std::string prefix) : prefix_(std::move(prefix)) {}
  std::filesystem::path dir;
  void SetUp() override {
    dir = std::filesystem::path(DT_BINARY_DIR) / "test_tmp" /
          (prefix_ + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  // A chat dataset on the tiny vision-language checkpoint, its prepared cache in the scratch folder.
  RunConfig config(const std::string& dataset) const {
    RunConfig c;
    c.base_model = kModel.string();
    c.datasets = {DatasetSpec{dataset, "chat", ""}};
    c.sequence_len = 256;
    c.val_set_size = 0;
    c.dataset_prepared_path = (dir / "cache").string();
    return c;
  }

 private:
  std::string prefix_;
};

}  // namespace deltatune::testing_vision
