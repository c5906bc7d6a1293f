// deltatune::Generator (deltatune/generate.h): prompts -> packed prefill -> one decode step per token for the
// whole batch, sampling on the host.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "deltatune/generate.h"
#include "decode/decode_loop.h"
#include "generate/adapter_source.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/backend_select.h"

namespace fs = std::filesystem;

namespace deltatune {

namespace {

nlohmann::json read_json_or_null(const fs::path& p) {
  std::ifstream in(p);
  if (!in.good()) return nullptr;
  auto j = nlohmann::json::parse(in, nullptr, false);
  check(!j.is_discarded(), p.string() + ": not valid JSON");
  return j;
}

// max_position_embeddings of config.json (top level or text_config); 262144 (Qwen3.5's) when absent.
int64_t context_of(const std::string& model_dir) {
  const auto j = read_json_or_null(fs::path(model_dir) / "config.json");
  for (const auto* o : {&j, j.is_object() && j.contains("text_config") ? &j["text_config"] : nullptr})
    if (o && o->is_object() && o->contains("max_position_embeddings") && (*o)["max_position_embeddings"].is_number_integer())
      return (*o)["max_position_embeddings"].get<int64_t>();
  return 262144;
}

}  // namespace

struct Generator::Impl {
  GeneratorOptions opts;
  ModelWeights weights;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Qwen35Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> tpl;
  std::string tpl_error;
  std::unique_ptr<LoraAdapter> adapter;
  std::unique_ptr<LoraComputeCopies> adapter_copies;
  std::string adapter_dir;
  std::string backend_note;
  std::set<int32_t> end_ids;
  int64_t context = 0;

  void load_adapter(const std::string& spec) {
    adapter_copies.reset();
    adapter.reset();
    adapter_dir.clear();
    if (spec.empty()) return;
    const std::string dir = resolve_adapter(spec, opts.db_path);
    auto a = std::make_unique<LoraAdapter>();
    try {
      *a = peft_adapter_read(dir, weights.config);
    } catch (const Error& e) {
      throw Error("the adapter " + dir + " does not fit the model " + opts.model_dir + ": " + e.what());
    }
    lora_to_backend(*a, *be);
    adapter = std::move(a);
    adapter_copies = std::make_unique<LoraComputeCopies>(*be, adapter.get());
    adapter_dir = dir;
  }
};

Generator::Generator(const GeneratorOptions& opts) : impl_(new Impl) {
  std::unique_ptr<Impl> guard(impl_);
  Impl& m = *impl_;
  m.opts = opts;
  check(!opts.model_dir.empty(), "generate: no model folder given");
  check(fs::is_directory(opts.model_dir), opts.model_dir + ": no such model folder");
  m.weights = model_weights_load(opts.model_dir);
  m.context = context_of(opts.model_dir);
  m.be = backend_create(opts.backend, opts.gpu, &m.backend_note);
  m.model = std::make_unique<Qwen35Model>(m.weights, *m.be);
  const fs::path dir(opts.model_dir);
  if (fs::exists(dir / "tokenizer.json")) m.tok = std::make_unique<Tokenizer>(Tokenizer::from_file(opts.model_dir));
  try {
    m.tpl = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(opts.model_dir));
  } catch (const Error& e) {
    m.tpl_error = e.what();
  }
  m.end_ids = generation_end_ids(opts.model_dir, m.weights.config.eos_token_id, m.tok.get(), m.tpl.get());
  m.load_adapter(opts.adapter);
  guard.release();
}

Generator::~Generator() { delete impl_; }

void Generator::set_adapter(const std::string& adapter) { impl_->load_adapter(adapter); }
bool Generator::has_adapter() const { return impl_->adapter != nullptr; }
const std::string& Generator::adapter_dir() const { return impl_->adapter_dir; }
std::string Generator::backend_name() const { return impl_->be->name(); }
const std::string& Generator::backend_note() const { return impl_->backend_note; }
int64_t Generator::context_length() const { return impl_->context; }
bool Generator::has_tokenizer() const { return impl_->tok != nullptr; }

std::vector<int32_t> Generator::prompt_ids(const GenerateRequest& req) const {
  const Impl& m = *impl_;
  if (req.messages.empty() && req.messages_json.empty()) return req.prompt_ids;
  check(m.tok != nullptr, m.opts.model_dir + ": no tokenizer.json, so messages cannot be turned into tokens");
  check(m.tpl != nullptr, m.opts.model_dir + ": no chat template (" + m.tpl_error + ")");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  if (!req.messages.empty()) {
    for (const auto& c : req.messages) msgs.push_back({{"role", c.role}, {"content", c.content}});
  } else {
    msgs = nlohmann::ordered_json::parse(req.messages_json, nullptr, false);
    check(!msgs.is_discarded() && msgs.is_array(), "generate: messages must be a JSON array of message objects");
  }
  ChatOptions co;
  co.add_generation_prompt = true;
  co.enable_thinking = req.enable_thinking;
  return m.tok->encode(m.tpl->render(msgs, nullptr, co));
}

std::vector<GenerateResult> Generator::generate(const std::vector<GenerateRequest>& requests,
                                                const GenerateCallback& on_event, const std::atomic<bool>* cancel) {
  Impl& m = *impl_;
  std::vector<DecodeSequence> seqs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string which = "request " + std::to_string(i + 1) + ": ";
    DecodeSequence& s = seqs[i];
    s.request = i;
    s.prompt = prompt_ids(requests[i]);
    s.sampling = requests[i].sampling;
    const int64_t n = static_cast<int64_t>(s.prompt.size());
    check(n > 0, which + "the prompt is empty");
    for (int32_t id : s.prompt)
      check(id >= 0 && id < m.weights.config.vocab_size,
            which + "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(m.weights.config.vocab_size - 1) + ")");
    check(n < m.context, which + "the prompt has " + std::to_string(n) + " tokens; the model's context is " +
                             std::to_string(m.context) + " tokens (max_position_embeddings in " + m.opts.model_dir +
                             "/config.json)");
    check(s.sampling.max_new_tokens > 0, which + "max_new_tokens must be at least 1");
    s.sampling.max_new_tokens = std::min<int64_t>(s.sampling.max_new_tokens, m.context - n);
  }
  std::vector<GenerateResult> results(requests.size());
  for (bool with_adapter : {false, true}) {
    std::vector<DecodeSequence*> group;
    for (size_t i = 0; i < requests.size(); ++i)
      if ((requests[i].use_adapter && m.adapter != nullptr) == with_adapter) group.push_back(&seqs[i]);
    if (group.empty()) continue;
    DecodeContext ctx{*m.model, with_adapter ? m.adapter.get() : nullptr, m.tok.get(), m.end_ids};
    run_decode(ctx, group, on_event, cancel);
  }
  for (size_t i = 0; i < requests.size(); ++i) results[i] = std::move(seqs[i].result);
  return results;
}

std::string resolve_adapter(const std::string& adapter, const std::string& db_path) {
  return resolve_adapter_folder(adapter, db_path);
}

}  // namespace deltatune
