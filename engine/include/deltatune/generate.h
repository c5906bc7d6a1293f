// Text generation with a base checkpoint and, optionally, a LoRA adapter applied unmerged: one copy of the
// base weights answers with or without the adapter, chosen per request. Prompts go through the checkpoint's
// own chat template; prefill once, then one token per step with the GDN recurrent state and a KV cache.
// Synchronous: the studio calls generate() on a worker thread; callbacks come from that thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace deltatune {

struct SamplingParams {
  int64_t max_new_tokens = 256;
  // <= 0: greedy (argmax). Otherwise softmax(logits / temperature) restricted by top_k / top_p.
  double temperature = 0.0;
  int64_t top_k = 0;                  // 0 = no limit
  double top_p = 1.0;                 // nucleus: smallest set of tokens whose probability reaches top_p
  double repetition_penalty = 1.0;    // as HF: logit / p when > 0 else logit · p, for every token seen so far
  uint64_t seed = 0;                  // per request: the same request gives the same tokens in any batch
  std::vector<std::string> stop;      // stop strings (not part of the returned text)
  bool ignore_eos = false;            // keep going past the end tokens (benchmarks)
};

struct ChatMessage {
  std::string role;     // system | user | assistant | tool
  std::string content;
};

// One prompt. Exactly one of messages, messages_json or prompt_ids is used, in that order of preference.
struct GenerateRequest {
  std::vector<ChatMessage> messages;  // rendered with the model's chat template, add_generation_prompt=true
  std::string messages_json;          // or: a JSON array of message objects (any fields the template reads)
  std::vector<int32_t> prompt_ids;    // or: token ids as they are (no template)
  // Passed to the template as HF's apply_chat_template(enable_thinking=...); unset = the template's default.
  std::optional<bool> enable_thinking;
  bool use_adapter = true;            // false: the base model answers (ignored when no adapter is loaded)
  SamplingParams sampling;
};

struct GenerateResult {
  std::string text;                // the answer (special tokens and the stop string left out)
  std::vector<int32_t> token_ids;  // generated ids, an end token that stopped it included
  std::string finish_reason;       // "stop" (end token or stop string) | "length" | "cancelled"
  int64_t prompt_tokens = 0;
};

// Streaming: called after each step for every request that produced new text (text_delta may be empty when a
// token only completes part of a UTF-8 character or may begin a stop string).
struct GenerateEvent {
  size_t request = 0;     // index into the requests
  int32_t token = -1;
  std::string text_delta;
  bool finished = false;  // the request's last event; its finish_reason is in `finish_reason`
  std::string finish_reason;
};
using GenerateCallback = std::function<void(const GenerateEvent&)>;

struct GeneratorOptions {
  std::string model_dir;            // HF checkpoint folder (config.json, safetensors, tokenizer files)
  // PEFT adapter folder, or a run id/name of the experiment database (its newest checkpoint's adapter, or the
  // adapter a finished run wrote); "" = none.
  std::string adapter;
  std::string db_path;              // experiment database for run ids ("" = the default one)
  std::string backend = "auto";     // cpu | cuda | auto
  int gpu = 0;
};

class Generator {
 public:
  // Loads the model (and adapter) onto the backend. Throws deltatune::Error with a message for the user when
  // a folder is missing or unreadable, the adapter does not fit this model, or a run has no adapter yet.
  explicit Generator(const GeneratorOptions& opts);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Replaces the adapter (folder or run, as GeneratorOptions::adapter; "" = none), keeping the base weights.
  void set_adapter(const std::string& adapter);
  bool has_adapter() const;
  const std::string& adapter_dir() const;  // the resolved folder ("" = none)
  std::string backend_name() const;
  // Why backend "auto" took the CPU ("" when it did not, or the backend was named).
  const std::string& backend_note() const;
  int64_t context_length() const;          // max_position_embeddings of config.json
  bool has_tokenizer() const;              // tokenizer.json in the model folder (needed for messages and text)

  // The prompt ids a request stands for (chat template + tokenizer, or its prompt_ids).
  std::vector<int32_t> prompt_ids(const GenerateRequest& req) const;

  // Generates for every request together (requests with and without the adapter run as two batches). `cancel`
  // set from another thread ends every request at the next step with finish_reason "cancelled". Throws
  // deltatune::Error before generating when a prompt is empty or does not fit the context.
  std::vector<GenerateResult> generate(const std::vector<GenerateRequest>& requests,
                                       const GenerateCallback& on_event = {},
                                       const std::atomic<bool>* cancel = nullptr);

 private:
  struct Impl;
  Impl* impl_;
};

// The adapter folder `adapter` stands for: the folder itself when it holds adapter_config.json, else the run of
// that id or name in the experiment database `db_path` ("" = default): its newest checkpoint, or its output
// folder's adapter when the run ended by itself. Throws deltatune::Error naming what is missing.
std::string resolve_adapter(const std::string& adapter, const std::string& db_path = "");

}  // namespace deltatune
