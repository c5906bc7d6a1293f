#include "data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/jinja/template.h"
#include "data/tokenizer.h"

namespace deltatune {

using ojson = nlohmann::ordered_json;

namespace {

jinja::Value to_value(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null:
      return jinja::Value::none();
    case ojson::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case ojson::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case ojson::value_t::number_unsigned:
      return jinja::Value(static_cast<int64_t>(j.get<uint64_t>()));
    case ojson::value_t::number_float:
      return jinja::Value(j.get<double>());
    case ojson::value_t::string:
      return jinja::Value(j.get<std::string>());
    case ojson::value_t::array: {
      jinja::List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(to_value(x));
      return jinja::Value::list(std::move(l));
    }
    case ojson::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), to_value(it.value()));
      return jinja::Value::dict(std::move(d));
    }
    default:
      return jinja::Value::none();
  }
}

// transformers' _alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}.
jinja::Value message_value(const ojson& m) {
  jinja::Value v = to_value(m);
  if (!m.is_object()) return v;
  const ojson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (!reasoning) return v;
  jinja::Dict d;
  d.set("thinking", to_value(*reasoning));
  for (const auto& [k, x] : v.dict_ref().items) d.set(k, x);
  d.set("reasoning_content", to_value(*reasoning));
  return jinja::Value::dict(std::move(d));
}

std::string token_string(const ojson& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string eos_token, std::string bos_token,
                           std::string pad_token, std::string unk_token, std::string name)
    : source_(source),
      eos_(std::move(eos_token)),
      bos_(std::move(bos_token)),
      pad_(std::move(pad_token)),
      unk_(std::move(unk_token)),
      name_(std::move(name)),
      tpl_(std::make_unique<jinja::Template>(source, name_)) {}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  ojson cfg = ojson::object();
  if (fs::exists(cfg_path)) {
    try {
      cfg = ojson::parse(read_file(cfg_path));
    } catch (const ojson::exception& e) {
      throw Error(cfg_path + ": invalid JSON: " + e.what());
    }
  }
  std::string source, origin;
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path)) {
    source = read_file(jinja_path);
    origin = jinja_path;
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    source = cfg["chat_template"].get<std::string>();
    origin = cfg_path + " chat_template";
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array()) {
    for (const auto& t : cfg["chat_template"])
      if (t.value("name", "") == "default") source = t.value("template", "");
    origin = cfg_path + " chat_template (default)";
  }
  check(
      !source.empty(),
      dir +
          ": no chat template (expected chat_template.jinja or \"chat_template\" in tokenizer_config.json)");
  return ChatTemplate(source, token_string(cfg, "eos_token"), token_string(cfg, "bos_token"),
                      token_string(cfg, "pad_token"), token_string(cfg, "unk_token"), origin);
}

std::string ChatTemplate::content_hash() const {
  return hash_bytes_hex(source_);
}

std::string ChatTemplate::render(const ojson& messages, const ojson& tools, const ChatOptions& opts) const {
  check(messages.is_array(), name_ + ": messages must be a JSON array");
  check(!messages.empty(), "cannot apply the chat template to an empty conversation");
  jinja::Dict ctx;
  // HF: {**special_tokens_map, **kwargs}; only the tokens the config sets are present.
  if (!bos_.empty()) ctx.set("bos_token", jinja::Value(bos_));
  if (!eos_.empty()) ctx.set("eos_token", jinja::Value(eos_));
  if (!pad_.empty()) ctx.set("pad_token", jinja::Value(pad_));
  if (!unk_.empty()) ctx.set("unk_token", jinja::Value(unk_));
  jinja::List msgs;
  for (const auto& m : messages) msgs.push_back(message_value(m));
  ctx.set("messages", jinja::Value::list(std::move(msgs)));
  ctx.set("tools", tools.is_null() ? jinja::Value::none() : to_value(tools));
  ctx.set("documents", jinja::Value::none());
  ctx.set("add_generation_prompt", jinja::Value(opts.add_generation_prompt));
  if (opts.enable_thinking) ctx.set("enable_thinking", jinja::Value(*opts.enable_thinking));
  return tpl_->render(jinja::Value::dict(std::move(ctx)));
}

ChatEncoding chat_encode(const Tokenizer& tok, const ChatTemplate& tpl, const ojson& messages,
                         const ojson& tools, const ChatOptions& opts_in, bool train_on_inputs) {
  ChatOptions opts = opts_in;
  opts.add_generation_prompt = false;
  ChatEncoding enc;
  enc.text = tpl.render(messages, tools, opts);
  enc.ids = tok.encode_with_offsets(enc.text, &enc.token_starts, &enc.token_ends);
  const size_t n = enc.ids.size();
  std::vector<char> trained(n, train_on_inputs ? 1 : 0);
  if (!train_on_inputs) {
    // Pass 1: per assistant turn, the rendered prefix and the role header.
    struct Turn {
      size_t index;
      std::optional<std::string> prefix, header;
      size_t turn_end = std::string::npos;  // where the conversation through this turn ends in the full text
    };
    std::vector<Turn> turns;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (!messages[i].is_object() || messages[i].value("role", "") != "assistant") continue;
      Turn t{i, std::nullopt, std::nullopt};
      if (i + 1 < messages.size()) {
        // The turn ends where the next message starts, when the full text begins with messages[:i+1] rendered
        // alone (else a template renders this turn differently as the last one: no limit).
        ojson through = ojson::array();
        for (size_t k = 0; k <= i; ++k) through.push_back(messages[k]);
        try {
          const std::string r = tpl.render(through, tools, opts);
          if (enc.text.compare(0, r.size(), r) == 0) t.turn_end = r.size();
        } catch (const Error&) {
        }
      }
      if (i > 0) {
        ojson prefix = ojson::array();
        for (size_t k = 0; k < i; ++k) prefix.push_back(messages[k]);
        try {
          ChatOptions with_prompt = opts;
          with_prompt.add_generation_prompt = true;
          std::string h = tpl.render(prefix, tools, opts);
          std::string g = tpl.render(prefix, tools, with_prompt);
          if (g.size() > h.size() && g.compare(0, h.size(), h) == 0) {
            std::string d = g.substr(h.size());
            const size_t nl = d.find('\n');
            t.header = nl == std::string::npos ? d : d.substr(0, nl + 1);
          }
          t.prefix = std::move(h);
        } catch (const Error&) {
          // A prefix some templates refuse to render (e.g. no user turn yet): use the header search.
        }
      }
      turns.push_back(std::move(t));
    }
    std::optional<std::string> fallback;
    for (const auto& t : turns)
      if (t.header && !t.header->empty()) {
        fallback = t.header;
        break;
      }
    // Pass 2: spans in the full text, mapped to tokens.
    size_t search_from = 0, tok_from = 0;
    for (const auto& t : turns) {
      const std::optional<std::string>& header = (t.header && !t.header->empty()) ? t.header : fallback;
      check(header.has_value(),
            "cannot find where assistant message " + std::to_string(t.index) +
                " starts: the chat template has no generation prompt to take its header from");
      size_t s;
      if (t.prefix && enc.text.compare(0, t.prefix->size(), *t.prefix) == 0 &&
          enc.text.compare(t.prefix->size(), header->size(), *header) == 0) {
        s = t.prefix->size() + header->size();
      } else {
        const size_t k = enc.text.find(*header, search_from);
        check(k != std::string::npos, "cannot find assistant message " + std::to_string(t.index) +
                                          " (header " + nlohmann::json(*header).dump() +
                                          ") in the rendered conversation");
        s = k + header->size();
      }
      size_t tk = tok_from;
      while (tk < n && enc.token_starts[tk] < static_cast<int64_t>(s)) ++tk;
      size_t end_byte = std::min(enc.text.size(), t.turn_end);
      const size_t first = tk;
      for (; tk < n && static_cast<size_t>(enc.token_starts[tk]) < end_byte; ++tk) {
        trained[tk] = 1;
        if (tok.is_special(enc.ids[tk])) {
          end_byte = static_cast<size_t>(enc.token_ends[tk]);
          ++tk;
          break;
        }
      }
      if (first < tk)
        enc.assistant_spans.emplace_back(enc.token_starts[first], static_cast<int64_t>(end_byte));
      search_from = end_byte;
      tok_from = tk;
    }
  } else {
    enc.assistant_spans.emplace_back(0, static_cast<int64_t>(enc.text.size()));
  }
  enc.labels.resize(n);
  for (size_t t = 0; t < n; ++t) enc.labels[t] = trained[t] ? enc.ids[t] : -100;
  return enc;
}

}  // namespace deltatune
