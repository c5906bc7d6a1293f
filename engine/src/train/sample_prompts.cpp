#include "train/sample_prompts.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "decode/decode_loop.h"
#include "model/lora_linear.h"
#include "model/qwen35_model.h"

namespace deltatune {

namespace {

// A chat of the JSONL file: {"messages": [...]} or a bare array of {role, content}.
std::string chat_of_line(const std::string& line, const std::string& where) {
  const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
  check(!j.is_discarded(), where + ": not valid JSON");
  const auto& msgs = j.is_object() && j.contains("messages") ? j["messages"] : j;
  check(msgs.is_array() && !msgs.empty(),
        where + ": expected {\"messages\": [...]} or an array of {role, content} messages");
  nlohmann::ordered_json chat = nlohmann::ordered_json::array();
  for (const auto& m : msgs) {
    check(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
              m["content"].is_string(),
          where + ": every message needs a string role and content");
    chat.push_back({{"role", m["role"]}, {"content", m["content"]}});
  }
  return chat.dump();
}

}  // namespace

SamplePrompts sample_prompts_load(const RunConfig& cfg, int64_t config_eos) {
  SamplePrompts p;
  p.chats = cfg.sample_prompts;
  if (!cfg.sample_prompts_file.empty()) {
    std::ifstream in(cfg.sample_prompts_file);
    check(in.good(), "sample_prompts: cannot read " + cfg.sample_prompts_file);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      p.chats.push_back(chat_of_line(line, cfg.sample_prompts_file + ":" + std::to_string(n)));
    }
    check(!p.chats.empty(), "sample_prompts: " + cfg.sample_prompts_file + " holds no prompts");
  }
  if (p.chats.empty()) return p;
  auto tok = std::make_shared<Tokenizer>(Tokenizer::from_file(cfg.base_model));
  const ChatTemplate tpl = ChatTemplate::from_model_dir(cfg.base_model);
  ChatOptions co;
  co.add_generation_prompt = true;
  if (cfg.enable_thinking != "auto") co.enable_thinking = cfg.enable_thinking == "true";
  for (size_t i = 0; i < p.chats.size(); ++i) {
    const auto msgs = nlohmann::ordered_json::parse(p.chats[i]);
    std::vector<int32_t> ids = tok->encode(tpl.render(msgs, nullptr, co));
    check(!ids.empty(), "sample_prompts[" + std::to_string(i) + "]: the rendered prompt is empty");
    check(static_cast<int64_t>(ids.size()) < cfg.sequence_len,
          "sample_prompts[" + std::to_string(i) + "]: the prompt has " + std::to_string(ids.size()) +
              " tokens, not less than sequence_len (" + std::to_string(cfg.sequence_len) + ")");
    p.prompt_ids.push_back(std::move(ids));
  }
  p.end_ids = generation_end_ids(cfg.base_model, config_eos, tok.get(), &tpl);
  p.tok = std::move(tok);
  p.max_new_tokens = cfg.sample_max_new_tokens;
  return p;
}

std::vector<SampleRecord> sample_prompts_generate(const SamplePrompts& p, Qwen35Model& model, LoraAdapter& adapter,
                                                  int64_t step,
                                                  const std::function<void(std::vector<int32_t>&)>& agree_tokens) {
  std::vector<DecodeSequence> seqs(p.chats.size());
  std::vector<DecodeSequence*> ptrs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].request = i;
    seqs[i].prompt = p.prompt_ids[i];
    seqs[i].sampling.max_new_tokens = p.max_new_tokens;
    ptrs.push_back(&seqs[i]);
  }
  {
    const LoraComputeCopies copies(model.backend(), &adapter);  // the factors as the last update left them
    DecodeContext ctx{model, &adapter, p.tok.get(), p.end_ids};
    ctx.agree_tokens = agree_tokens;
    run_decode(ctx, ptrs, {}, nullptr);
  }
  std::vector<SampleRecord> out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    SampleRecord r;
    r.step = step;
    r.prompt_index = static_cast<int64_t>(i);
    r.prompt = p.chats[i];
    r.text = seqs[i].result.text;
    r.tokens = static_cast<int64_t>(seqs[i].result.token_ids.size());
    r.finish_reason = seqs[i].result.finish_reason;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace deltatune
