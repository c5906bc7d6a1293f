// Inputs that once crashed fuzz_dataset_lines (tests/fuzz/regressions/dataset_lines-*) stay checked in
// the ordinary test suite too, which runs without clang/libFuzzer: each must end in a deltatune::Error
// naming the file, or parse; any other exception is the bug coming back.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/dataset_reader.h"
#include "io/files.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

TEST(DataFuzzRegressions, DatasetLinesEndInErrorOrParse) {
  const fs::path dir = fs::path(DT_SOURCE_DIR) / "tests" / "fuzz" / "regressions";
  const char* const types[] = {"", "chat", "messages", "sharegpt", "alpaca", "completion", "pretokenized"};
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("dataset_lines-", 0) != 0) continue;
    const std::string bytes = read_text_file(e.path().string());
    ASSERT_FALSE(bytes.empty()) << name;
    // Same decoding as the fuzz target: the first byte picks the type and skip_bad_rows.
    const auto flags = static_cast<unsigned char>(bytes[0]);
    try {
      dataset_parse_text(bytes.substr(1), "f.jsonl", types[(flags & 7) % 7], (flags & 0x80) != 0);
    } catch (const Error& err) {
      EXPECT_EQ(std::string(err.what()).rfind("f.jsonl", 0), 0u) << name << ": " << err.what();
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace deltatune
