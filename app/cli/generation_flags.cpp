#include "generation_flags.h"

#include <sstream>

namespace deltatune::cli {

namespace {

int64_t int_option(const ParsedArgs& p, const std::string& key, int64_t fallback, int64_t min) {
  if (!p.has(key)) return fallback;
  const std::string v = p.get(key);
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || x < min)
    throw UsageError(key + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return x;
}

double real_option(const ParsedArgs& p, const std::string& key, double fallback, double min, double max) {
  if (!p.has(key)) return fallback;
  const std::string v = p.get(key);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !(x >= min && x <= max)) {
    std::ostringstream range;  // "[0, 100]", not std::to_string's "[0.000000, 100.000000]"
    range << "[" << min << ", " << max << "]";
    throw UsageError(key + ": expected a number in " + range.str() + ", got '" + v + "'");
  }
  return x;
}

}  // namespace

const char* const kSamplingUsage =
    "  --adapter DIR|RUN          PEFT adapter folder, or a run id/name (its newest checkpoint)\n"
    "  --backend cpu|cuda|auto    (default auto)   --gpu N   --db FILE (experiment database for RUN)\n"
    "  --max-new-tokens N         (default 256)\n"
    "  --temperature T            0 = greedy (default 0)\n"
    "  --top-k K  --top-p P  --repetition-penalty R  --seed S\n"
    "  --stop STRING              stop when the answer contains STRING\n"
    "  --thinking on|off          the template's enable_thinking (default: the template's own)\n"
    "  --ignore-eos               keep generating past the end token\n";

std::set<std::string> generation_value_options() {
  return {"--model", "--adapter", "--db", "--backend", "--gpu", "--max-new-tokens", "--temperature", "--top-k",
          "--top-p", "--repetition-penalty", "--seed", "--stop", "--thinking"};
}

std::set<std::string> generation_flag_options() { return {"--ignore-eos"}; }

GeneratorOptions generator_options(const ParsedArgs& p) {
  if (!p.has("--model")) throw UsageError("--model DIR is required");
  GeneratorOptions o;
  o.model_dir = p.get("--model");
  o.adapter = p.get("--adapter");
  o.db_path = p.get("--db");
  o.backend = p.get("--backend", "auto");
  if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "auto")
    throw UsageError("--backend: expected cpu, cuda or auto, got '" + o.backend + "'");
  o.gpu = static_cast<int>(int_option(p, "--gpu", 0, 0));
  return o;
}

SamplingParams sampling_params(const ParsedArgs& p) {
  SamplingParams s;
  s.max_new_tokens = int_option(p, "--max-new-tokens", s.max_new_tokens, 1);
  s.temperature = real_option(p, "--temperature", s.temperature, 0.0, 100.0);
  s.top_k = int_option(p, "--top-k", s.top_k, 0);
  s.top_p = real_option(p, "--top-p", s.top_p, 1e-9, 1.0);
  s.repetition_penalty = real_option(p, "--repetition-penalty", s.repetition_penalty, 1e-3, 100.0);
  s.seed = static_cast<uint64_t>(int_option(p, "--seed", 0, 0));
  if (p.has("--stop")) s.stop.push_back(p.get("--stop"));
  s.ignore_eos = p.has("--ignore-eos");
  return s;
}

std::optional<bool> thinking_flag(const ParsedArgs& p) {
  if (!p.has("--thinking")) return std::nullopt;
  const std::string v = p.get("--thinking");
  if (v == "on" || v == "true") return true;
  if (v == "off" || v == "false") return false;
  throw UsageError("--thinking: expected on or off, got '" + v + "'");
}

}  // namespace deltatune::cli
