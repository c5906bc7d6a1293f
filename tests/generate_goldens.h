// The greedy generation goldens of tests/goldens/generate (HF generate, fp32, CPU), shared by the CPU and
// CUDA test binaries.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deltatune::testing_goldens {

struct GenerateCase {
  std::string name, model_dir, adapter_dir;  // adapter_dir "" = base model
  std::vector<std::vector<int32_t>> prompts, outputs;
  std::vector<std::vector<double>> top2_gaps;  // per prompt and step: HF's top-1 minus top-2 logit
};

inline std::vector<GenerateCase> read_generate_goldens(const std::filesystem::path& goldens, int64_t* max_new) {
  std::ifstream in(goldens / "generate" / "golden_generate.json");
  const auto j = nlohmann::json::parse(in);
  *max_new = j["max_new_tokens"].get<int64_t>();
  std::vector<GenerateCase> out;
  for (const auto& c : j["cases"]) {
    GenerateCase g;
    g.name = c["name"].get<std::string>();
    g.model_dir = (goldens / "models" / c["model"].get<std::string>()).string();
    if (!c["adapter"].is_null()) g.adapter_dir = (goldens / "lora" / c["adapter"].get<std::string>() / "adapter").string();
    g.prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    g.outputs = c["outputs"].get<std::vector<std::vector<int32_t>>>();
    g.top2_gaps = c["top2_gaps"].get<std::vector<std::vector<double>>>();
    out.push_back(std::move(g));
  }
  return out;
}

// Index of the first differing token (the shorter length when one is a prefix of the other; -1 when equal).
inline int64_t first_divergence(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace deltatune::testing_goldens
