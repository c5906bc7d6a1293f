// Readers for the golden files under tests/goldens, shared by the CPU and CUDA test binaries.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/batch.h"
#include "model/qwen35_model.h"

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

struct LossSum {
  double sum = 0;     // Σ CE over the trained targets
  int64_t targets = 0;
};

// Forward of each sequence on its own (no LoRA), the way the HF goldens were made.
inline LossSum loss_each_sequence(Qwen35Model& model, const std::vector<Example>& seqs,
                                  const StepOptions& opts = {}) {
  LossSum r;
  for (const auto& ex : seqs) {
    const StepOutput o = model.step(batch_from_examples({&ex}), nullptr, opts);
    r.sum += o.loss_sum;
    r.targets += o.targets;
  }
  return r;
}

// All sequences as one packed row.
inline Batch packed_batch(const std::vector<Example>& seqs) {
  std::vector<const Example*> all;
  for (const auto& ex : seqs) all.push_back(&ex);
  return batch_from_examples(all);
}

}  // namespace deltatune::testing_goldens
