// `deltatune eval`: loss of pre-tokenized sequences = Σ CE over trained targets / their count.
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/batch.h"
#include "deltatune/evaluate.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/backend_select.h"

namespace deltatune {
namespace {

std::vector<Example> read_pretokenized(const std::string& path, int64_t vocab) {
  std::ifstream in(path);
  check(in.good(), path + ": cannot open the data file");
  std::vector<Example> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw Error(where + "not valid JSON (" + std::string(e.what()) + ")");
    }
    check(j.is_object() && j.contains("input_ids"), where + "expected an object with \"input_ids\"");
    auto ids_of = [&](const char* key) {
      const auto& a = j[key];
      check(a.is_array(), where + "\"" + key + "\" must be an array of integers");
      std::vector<int32_t> v;
      v.reserve(a.size());
      for (const auto& x : a) {
        check(x.is_number_integer(), where + "\"" + key + "\" must contain only integers");
        v.push_back(x.get<int32_t>());
      }
      return v;
    };
    Example ex;
    ex.input_ids = ids_of("input_ids");
    check(!ex.input_ids.empty(), where + "\"input_ids\" is empty");
    for (int32_t id : ex.input_ids)
      check(id >= 0 && id < vocab, where + "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                       std::to_string(vocab - 1) + ")");
    if (j.contains("labels") && !j["labels"].is_null()) {
      ex.labels = ids_of("labels");
      check(ex.labels.size() == ex.input_ids.size(),
            where + "\"labels\" has " + std::to_string(ex.labels.size()) + " entries, \"input_ids\" has " +
                std::to_string(ex.input_ids.size()));
      for (int32_t l : ex.labels)
        check(l == -100 || (l >= 0 && l < vocab), where + "label " + std::to_string(l) + " is neither -100 nor a token id");
    } else {
      ex.labels = ex.input_ids;
    }
    out.push_back(std::move(ex));
  }
  check(!out.empty(), path + ": no sequences");
  return out;
}

// Consecutive sequences packed into rows of at most seq_len tokens; a longer sequence gets a row alone.
std::vector<std::vector<const Example*>> pack_rows(const std::vector<Example>& exs, int64_t seq_len) {
  std::vector<std::vector<const Example*>> rows;
  int64_t used = 0;
  for (const Example& ex : exs) {
    const int64_t n = static_cast<int64_t>(ex.input_ids.size());
    if (seq_len <= 0 || rows.empty() || used + n > seq_len) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(&ex);
    used += n;
  }
  return rows;
}

}  // namespace

EvalResult evaluate(const EvalOptions& opts) {
  ModelWeights weights = model_weights_load(opts.model_dir);
  std::vector<Example> data = read_pretokenized(opts.data_path, weights.config.vocab_size);
  auto be = backend_create(opts.backend);
  Qwen35Model model(weights, *be);
  LoraAdapter adapter;
  LoraAdapter* lora = nullptr;
  if (!opts.adapter_dir.empty()) {
    adapter = peft_adapter_read(opts.adapter_dir, weights.config);
    lora_to_backend(adapter, *be);
    lora = &adapter;
  }
  EvalResult r;
  double loss_sum = 0;
  StepOptions so;
  for (const auto& row : pack_rows(data, opts.seq_len)) {
    const Batch b = batch_from_examples(row);
    const StepOutput out = model.step(b, lora, so);
    loss_sum += out.loss_sum;
    r.tokens += out.targets;
    r.input_tokens += static_cast<int64_t>(b.input_ids.size());
  }
  r.sequences = static_cast<int64_t>(data.size());
  check(r.tokens > 0, opts.data_path + ": no trained targets (every label is -100)");
  r.loss = loss_sum / static_cast<double>(r.tokens);
  return r;
}

}  // namespace deltatune
