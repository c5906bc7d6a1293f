// The run config's sample_prompts: rendered with the base model's chat template and tokenised once when the run
// starts (a bad prompt or file fails the run before training), then generated greedily with the model and the
// LoRA being trained (applied unmerged, no dropout) at every eval step.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"

namespace deltatune {

class Qwen35Model;
struct LoraAdapter;
class Tokenizer;

struct SamplePrompts {
  std::vector<std::string> chats;                 // each a JSON array of {role, content}
  std::vector<std::vector<int32_t>> prompt_ids;   // the chats rendered (add_generation_prompt) and tokenised
  std::set<int32_t> end_ids;
  std::shared_ptr<const Tokenizer> tok;
  int64_t max_new_tokens = 0;
  bool empty() const { return chats.empty(); }
};

// The chats of cfg.sample_prompts, or of the JSONL file cfg.sample_prompts_file (one chat per line: a
// {"messages": [...]} object or a bare array). Empty when the config has none. Throws Error naming the file and
// line, or the prompt, that cannot be used.
SamplePrompts sample_prompts_load(const RunConfig& cfg, int64_t config_eos);

// One greedy generation of every prompt (one batch), as the records of `step`. A model whose forward is a
// collective (sharded weights, expert parallel) is generated on every worker at once, with `agree_tokens` making
// them take rank 0's tokens (decode/decode_loop.h).
std::vector<SampleRecord> sample_prompts_generate(const SamplePrompts& p, Qwen35Model& model, LoraAdapter& adapter,
                                                  int64_t step,
                                                  const std::function<void(std::vector<int32_t>&)>& agree_tokens = {});

}  // namespace deltatune
