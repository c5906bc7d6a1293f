// `deltatune prepare`: a run's datasets read, rendered, tokenized (or taken from the token cache), split and
// packed exactly as training will see them; the statistics, and optionally the tokens as JSON lines.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deltatune/data_preview.h"  // DataStats, DatasetSummary
#include "deltatune/run_config.h"

namespace deltatune {

struct PrepareResult {
  std::vector<DatasetSummary> datasets;  // one per dataset file, in config order
  DataStats train_stats, eval_stats;
  int64_t train_examples = 0, eval_examples = 0;
};

// `log` gets progress lines. With tokens_out set, writes (atomically) one {"input_ids", "labels"} line per
// example: train examples, then validation examples with "split": "validation". Throws deltatune::Error
// ("file:line: reason").
PrepareResult prepare_data(const RunConfig& cfg, const std::function<void(const std::string&)>& log,
                           const std::string& tokens_out = "");

}  // namespace deltatune
