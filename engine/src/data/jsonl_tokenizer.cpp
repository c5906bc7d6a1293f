// deltatune/tokenize.h over the tokenizer, the chat template and the dataset row parser.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/utf8.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/tokenizer.h"
#include "deltatune/tokenize.h"

namespace deltatune {

using ojson = nlohmann::ordered_json;

namespace {

ojson ids_json(const std::vector<int32_t>& v) {
  ojson a = ojson::array();
  for (int32_t x : v) a.push_back(x);
  return a;
}

}  // namespace

struct JsonlTokenizer::Impl {
  Tokenizer tok;
  std::unique_ptr<ChatTemplate> tpl;  // set with TokenizeOptions::chat
  TokenizeOptions opts;
};

JsonlTokenizer::JsonlTokenizer(const std::string& model_dir, const TokenizeOptions& opts)
    : impl_(new Impl{Tokenizer::from_file(model_dir), nullptr, opts}) {
  if (opts.chat) impl_->tpl = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(model_dir));
}

JsonlTokenizer::~JsonlTokenizer() = default;

std::string JsonlTokenizer::tokenize_line(const std::string& line, const std::string& where) const {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return "";
  const size_t bad = utf8_find_invalid(line);
  check(bad == std::string::npos, where + ": invalid UTF-8 at byte " + std::to_string(bad));
  ojson in;
  try {
    in = ojson::parse(line);
  } catch (const ojson::parse_error& e) {
    throw Error(where + ": malformed JSON: " + e.what());
  }
  check(in.is_object(), where + ": expected a JSON object");
  const Tokenizer& tok = impl_->tok;
  ojson out = ojson::object();
  if (!impl_->opts.chat) {
    check(in.contains("text") && in["text"].is_string(), where + ": expected {\"text\": string}");
    out["ids"] = ids_json(tok.encode(in["text"].get<std::string>()));
    return out.dump();
  }
  const ChatTemplate& tpl = *impl_->tpl;
  const DatasetRow row = dataset_parse_row(in, "chat", where);  // validates roles/content like training does
  ChatOptions opts;
  opts.add_generation_prompt = impl_->opts.add_generation_prompt;
  opts.enable_thinking = impl_->opts.enable_thinking;
  if (in.contains("add_generation_prompt")) opts.add_generation_prompt = in["add_generation_prompt"].get<bool>();
  if (in.contains("enable_thinking")) opts.enable_thinking = in["enable_thinking"].get<bool>();
  ChatEncoding enc = chat_encode(tok, tpl, row.messages, row.tools, opts, impl_->opts.train_on_inputs);
  if (opts.add_generation_prompt) {
    // The prompt is appended after the conversation and never trained.
    const std::string text = tpl.render(row.messages, row.tools, opts);
    std::vector<int32_t> ids = tok.encode(text);
    std::vector<int32_t> labels(ids.size(), -100);
    if (ids.size() >= enc.ids.size() && std::equal(enc.ids.begin(), enc.ids.end(), ids.begin()))
      std::copy(enc.labels.begin(), enc.labels.end(), labels.begin());
    enc.text = text;
    enc.ids = std::move(ids);
    enc.labels = std::move(labels);
  }
  out["text"] = enc.text;
  out["ids"] = ids_json(enc.ids);
  out["labels"] = ids_json(enc.labels);
  return out.dump();
}

}  // namespace deltatune
