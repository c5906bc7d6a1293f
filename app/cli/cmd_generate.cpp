// deltatune generate --model DIR [--adapter DIR|RUN] --prompts FILE.jsonl [--out FILE] [--batch N] [sampling]
// Each input line: {"messages": [...]} | {"prompt": "text"} (one user turn) | {"input_ids": [...]}, optionally
// with "max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed", "stop" (string or list),
// "enable_thinking" and "adapter": false (the base model answers). One output line per input line, in order:
// {"index", "text", "token_ids", "finish_reason", "prompt_tokens"}.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "generation_flags.h"

namespace deltatune::cli {

namespace {

const char* const kUsage =
    "usage: deltatune generate --model DIR [--adapter DIR|RUN] --prompts FILE.jsonl [--out FILE] [--batch N]\n";

GenerateRequest request_of(const nlohmann::json& j, const SamplingParams& defaults, std::optional<bool> thinking,
                           const std::string& where) {
  if (!j.is_object()) throw UsageError(where + "expected a JSON object");
  GenerateRequest r;
  r.sampling = defaults;
  r.enable_thinking = thinking;
  if (j.contains("messages")) {
    if (!j["messages"].is_array()) throw UsageError(where + "\"messages\" must be an array of message objects");
    r.messages_json = j["messages"].dump();
  } else if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) throw UsageError(where + "\"prompt\" must be a string");
    r.messages = {{"user", j["prompt"].get<std::string>()}};
  } else if (j.contains("input_ids")) {
    if (!j["input_ids"].is_array()) throw UsageError(where + "\"input_ids\" must be an array of integers");
    for (const auto& x : j["input_ids"]) {
      if (!x.is_number_integer()) throw UsageError(where + "\"input_ids\" must contain only integers");
      r.prompt_ids.push_back(x.get<int32_t>());
    }
  } else {
    throw UsageError(where + "expected \"messages\", \"prompt\" or \"input_ids\"");
  }
  try {
    if (j.contains("max_new_tokens")) r.sampling.max_new_tokens = j["max_new_tokens"].get<int64_t>();
    if (j.contains("temperature")) r.sampling.temperature = j["temperature"].get<double>();
    if (j.contains("top_k")) r.sampling.top_k = j["top_k"].get<int64_t>();
    if (j.contains("top_p")) r.sampling.top_p = j["top_p"].get<double>();
    if (j.contains("repetition_penalty")) r.sampling.repetition_penalty = j["repetition_penalty"].get<double>();
    if (j.contains("seed")) r.sampling.seed = j["seed"].get<uint64_t>();
    if (j.contains("stop")) {
      r.sampling.stop.clear();
      if (j["stop"].is_string()) r.sampling.stop.push_back(j["stop"].get<std::string>());
      else r.sampling.stop = j["stop"].get<std::vector<std::string>>();
    }
    if (j.contains("enable_thinking")) r.enable_thinking = j["enable_thinking"].get<bool>();
    if (j.contains("adapter")) r.use_adapter = j["adapter"].get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(where + "a sampling field has the wrong type (" + e.what() + ")");
  }
  return r;
}

int run(const Args& args) {
  auto values = generation_value_options();
  values.insert({"--prompts", "--out", "--batch"});
  const ParsedArgs p = parse_args(args, values, generation_flag_options());
  if (!p.has("--prompts")) throw UsageError("--prompts FILE.jsonl is required");
  const SamplingParams defaults = sampling_params(p);
  const std::optional<bool> thinking = thinking_flag(p);
  int64_t batch = 8;
  if (p.has("--batch")) {
    try {
      batch = std::stoll(p.get("--batch"));
    } catch (const std::exception&) {
      batch = 0;
    }
    if (batch < 1) throw UsageError("--batch: expected a positive integer, got '" + p.get("--batch") + "'");
  }
  const std::string path = p.get("--prompts");
  std::ifstream in(path);
  if (!in.good()) throw UsageError(path + ": cannot open the prompts file");
  std::vector<GenerateRequest> reqs;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw UsageError(where + "not valid JSON");
    reqs.push_back(request_of(j, defaults, thinking, where));
  }
  if (reqs.empty()) throw UsageError(path + ": no prompts");

  Generator gen(generator_options(p));
  if (!gen.backend_note().empty()) std::cerr << gen.backend_note() << "\n";
  std::ofstream file;
  if (p.has("--out")) {
    file.open(p.get("--out"));
    if (!file.good()) throw UsageError(p.get("--out") + ": cannot write");
  }
  std::ostream& out = p.has("--out") ? file : std::cout;
  for (size_t b = 0; b < reqs.size(); b += static_cast<size_t>(batch)) {
    const size_t e = std::min(reqs.size(), b + static_cast<size_t>(batch));
    const std::vector<GenerateRequest> part(reqs.begin() + b, reqs.begin() + e);
    const auto res = gen.generate(part);
    for (size_t i = 0; i < res.size(); ++i) {
      nlohmann::ordered_json o;
      o["index"] = b + i;
      o["text"] = res[i].text;
      o["token_ids"] = res[i].token_ids;
      o["finish_reason"] = res[i].finish_reason;
      o["prompt_tokens"] = res[i].prompt_tokens;
      out << o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    out.flush();
  }
  return 0;
}

}  // namespace

int cmd_generate(const Args& args) {
  try {
    return run(args);
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n" << kUsage << kSamplingUsage;
    return 2;
  }
}

}  // namespace deltatune::cli
