// deltatune tokenize --model DIR [--chat] [--add-generation-prompt] [--enable-thinking true|false]
//                    [--train-on-inputs]
// JSONL on stdin -> JSONL on stdout. Plain: {"text": ...} -> {"ids": [...]}. With --chat:
// {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool, "enable_thinking"?: bool}
// -> {"text": rendered, "ids": [...], "labels": [...]} (labels: -100 where not trained).
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

namespace deltatune::cli {

using ojson = nlohmann::ordered_json;

namespace {

ojson ids_json(const std::vector<int32_t>& v) {
  ojson a = ojson::array();
  for (int32_t x : v) a.push_back(x);
  return a;
}

bool parse_bool(const std::string& s, const std::string& option) {
  if (s == "true" || s == "1" || s == "yes") return true;
  if (s == "false" || s == "0" || s == "no") return false;
  throw Error(option + " expects true or false, got '" + s + "'");
}

}  // namespace

int cmd_tokenize(const Args& raw) {
  const auto args = parse_args(raw, {"--model", "--enable-thinking"},
                               {"--chat", "--add-generation-prompt", "--train-on-inputs"});
  check(args.has("--model"),
        "usage: deltatune tokenize --model DIR [--chat] [--add-generation-prompt] "
        "[--enable-thinking true|false] [--train-on-inputs] < input.jsonl");
  const std::string dir = args.get("--model");
  const Tokenizer tok = Tokenizer::from_file(dir);
  const bool chat = args.has("--chat");
  std::unique_ptr<ChatTemplate> tpl;
  if (chat) tpl = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(dir));
  ChatOptions defaults;
  defaults.add_generation_prompt = args.has("--add-generation-prompt");
  if (args.has("--enable-thinking"))
    defaults.enable_thinking = parse_bool(args.get("--enable-thinking"), "--enable-thinking");
  const bool train_on_inputs = args.has("--train-on-inputs");

  std::string line;
  int64_t n = 0;
  std::ios::sync_with_stdio(false);
  while (std::getline(std::cin, line)) {
    ++n;
    const std::string where = "stdin:" + std::to_string(n);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const size_t bad = utf8_find_invalid(line);
    check(bad == std::string::npos, where + ": invalid UTF-8 at byte " + std::to_string(bad));
    ojson in;
    try {
      in = ojson::parse(line);
    } catch (const ojson::parse_error& e) {
      throw Error(where + ": malformed JSON: " + e.what());
    }
    check(in.is_object(), where + ": expected a JSON object");
    ojson out = ojson::object();
    if (!chat) {
      check(in.contains("text") && in["text"].is_string(), where + ": expected {\"text\": string}");
      out["ids"] = ids_json(tok.encode(in["text"].get<std::string>()));
    } else {
      const DatasetRow row =
          dataset_parse_row(in, "chat", where);  // validates roles/content like training does
      ChatOptions opts = defaults;
      if (in.contains("add_generation_prompt"))
        opts.add_generation_prompt = in["add_generation_prompt"].get<bool>();
      if (in.contains("enable_thinking")) opts.enable_thinking = in["enable_thinking"].get<bool>();
      ChatEncoding enc = chat_encode(tok, *tpl, row.messages, row.tools, opts, train_on_inputs);
      if (opts.add_generation_prompt) {
        // The prompt is appended after the conversation and never trained.
        const std::string text = tpl->render(row.messages, row.tools, opts);
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
    }
    std::cout << out.dump() << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace deltatune::cli
