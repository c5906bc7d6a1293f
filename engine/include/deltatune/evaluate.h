// `deltatune eval`: the loss of a checkpoint (with an optional adapter) on pre-tokenized data.
#pragma once
#include <cstdint>
#include <string>

namespace deltatune {

struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;      // trained targets
  int64_t sequences = 0;
  int64_t input_tokens = 0;
};

struct EvalOptions {
  std::string model_dir;
  std::string data_path;      // JSONL {"input_ids": [...], "labels": [...]?}
  std::string adapter_dir;    // optional PEFT adapter
  int64_t seq_len = 0;        // > 0: pack into rows of this many tokens
  std::string backend = "cpu";
};
EvalResult evaluate(const EvalOptions& opts);

}  // namespace deltatune
