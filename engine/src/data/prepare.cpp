// deltatune/prepare.h over the data pipeline.
#include "deltatune/prepare.h"

#include <nlohmann/json.hpp>

#include "data/pipeline.h"
#include "io/files.h"

namespace deltatune {

PrepareResult prepare_data(const RunConfig& cfg, const std::function<void(const std::string&)>& log,
                           const std::string& tokens_out) {
  const PreparedData data = data_prepare(cfg, log);
  if (!tokens_out.empty()) {
    std::string out;
    auto emit = [&](const Example& e, bool eval) {
      nlohmann::ordered_json j;
      j["input_ids"] = e.input_ids;
      j["labels"] = e.labels;
      if (eval) j["split"] = "validation";
      out += j.dump();
      out += '\n';
    };
    for (const auto& e : data.train) emit(e, false);
    for (const auto& e : data.eval) emit(e, true);
    write_text_file_atomic(tokens_out, out);
  }
  PrepareResult r;
  r.datasets = data.datasets;
  r.train_stats = data.train_stats;
  r.eval_stats = data.eval_stats;
  r.train_examples = static_cast<int64_t>(data.train.size());
  r.eval_examples = static_cast<int64_t>(data.eval.size());
  return r;
}

}  // namespace deltatune
