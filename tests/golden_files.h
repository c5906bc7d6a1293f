// Readers for the golden files under tests/goldens, shared by the CPU and CUDA test binaries.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/batch.h"

namespace deltatune::testing_goldens {

// golden_eval.jsonl: {"input_ids": [...], "labels": [...]?} per line.
inline std::vector<Example> read_jsonl(const std::filesystem::path& p) {
  std::vector<Example> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    Example ex;
    ex.input_ids = j["input_ids"].get<std::vector<int32_t>>();
    ex.labels = j.contains("labels") ? j["labels"].get<std::vector<int32_t>>() : ex.input_ids;
    out.push_back(ex);
  }
  return out;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace deltatune::testing_goldens
