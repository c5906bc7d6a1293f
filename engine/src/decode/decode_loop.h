// The generation loop of one batch: packed prefill of every prompt, then one forward per step for all
// sequences (a finished one keeps its slot and is fed its last token again until the batch ends).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "deltatune/generate.h"

namespace deltatune {

class Qwen35Model;
struct LoraAdapter;
class Tokenizer;
class ChatTemplate;

struct DecodeSequence {
  size_t request = 0;            // index reported in events
  std::vector<int32_t> prompt;
  SamplingParams sampling;       // max_new_tokens already fitted to the context
  GenerateResult result;         // filled by run_decode
};

struct DecodeContext {
  Qwen35Model& model;
  LoraAdapter* lora;             // null: the base model
  const Tokenizer* tok;          // null: no text
  const std::set<int32_t>& end_ids;
  // Record the decode step once (a CUDA graph) and replay it for every token; backends that cannot record, or a
  // recording that fails, run the step op by op.
  bool record_step = true;
  // Workers that generate together (sharded weights, expert parallel: every forward is a collective of all of
  // them) must take the same tokens and stop at the same step: called with this worker's next token of every
  // sequence (-1 for finished ones), it leaves there the tokens all workers use. Null: one process.
  std::function<void(std::vector<int32_t>&)> agree_tokens;
};

// Generates for every sequence together. With a LoRA adapter the caller holds a LoraComputeCopies of it for the
// call (the products read its compute-dtype factors). The trainer's sample generations can call this with its
// own model and adapter (train/sample_prompts).
void run_decode(const DecodeContext& ctx, const std::vector<DecodeSequence*>& seqs, const GenerateCallback& on_event,
                const std::atomic<bool>* cancel);

// The tokens generation stops at for the checkpoint in model_dir: generation_config.json's eos_token_id (what HF
// generate stops at), else config.json's (config_eos, < 0 = none), plus the chat template's eos_token
// (<|im_end|> for the chat checkpoints) when a tokenizer and template are given.
std::set<int32_t> generation_end_ids(const std::string& model_dir, int64_t config_eos, const Tokenizer* tok,
                                     const ChatTemplate* tpl);

}  // namespace deltatune
