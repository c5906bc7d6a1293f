// The generation loop of one batch: packed prefill of every prompt, then one forward per step for all
// sequences (a finished one keeps its slot and is fed its last token again until the batch ends).
#pragma once
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "deltatune/generate.h"

namespace deltatune {

class Qwen35Model;
struct LoraAdapter;
class Tokenizer;

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
};

// Generates for every sequence together. With a LoRA adapter the caller holds a LoraComputeCopies of it for the
// call (the products read its compute-dtype factors). The trainer's sample generations can call this with its
// own model and adapter.
void run_decode(const DecodeContext& ctx, const std::vector<DecodeSequence*>& seqs, const GenerateCallback& on_event,
                const std::atomic<bool>* cancel);

// See deltatune::resolve_adapter.
std::string resolve_adapter_folder(const std::string& adapter, const std::string& db_path);

}  // namespace deltatune
