// Where tests find data that is not in the repository. Each path comes from an environment variable or,
// when that is unset, from the CMake cache variable of the same name (empty by default); a test whose data
// is absent skips and names the variable (see docs/DEVELOPING.md, "Test data").
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#ifndef DT_QWEN3_TOKENIZER
#define DT_QWEN3_TOKENIZER ""
#endif

namespace deltatune::test_data {

// The Qwen3 tokenizer.json (Qwen/Qwen3-0.6B on the Hugging Face Hub): DT_QWEN3_TOKENIZER.
inline std::string qwen3_tokenizer() {
  if (const char* e = std::getenv("DT_QWEN3_TOKENIZER"); e && *e) return e;
  return DT_QWEN3_TOKENIZER;
}

// Empty when `path` exists, else why the test skips.
inline std::string missing(const std::string& path, const std::string& variable) {
  if (!path.empty() && std::filesystem::exists(path)) return {};
  if (path.empty())
    return variable + " is not set (environment or cmake -D" + variable + "=PATH): this test's data is absent";
  return variable + "=" + path + " does not exist: this test's data is absent";
}

}  // namespace deltatune::test_data
