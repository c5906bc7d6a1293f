// deltatune tokenize --model DIR [--chat] [--add-generation-prompt] [--enable-thinking true|false]
//                    [--train-on-inputs]
// JSONL on stdin -> JSONL on stdout. Plain: {"text": ...} -> {"ids": [...]}. With --chat:
// {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool, "enable_thinking"?: bool}
// -> {"text": rendered, "ids": [...], "labels": [...]} (labels: -100 where not trained).
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/tokenize.h"

namespace deltatune::cli {

namespace {

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
  TokenizeOptions opts;
  opts.chat = args.has("--chat");
  opts.add_generation_prompt = args.has("--add-generation-prompt");
  if (args.has("--enable-thinking"))
    opts.enable_thinking = parse_bool(args.get("--enable-thinking"), "--enable-thinking");
  opts.train_on_inputs = args.has("--train-on-inputs");
  const JsonlTokenizer tokenizer(args.get("--model"), opts);

  std::string line;
  int64_t n = 0;
  std::ios::sync_with_stdio(false);
  while (std::getline(std::cin, line)) {
    ++n;
    const std::string out = tokenizer.tokenize_line(line, "stdin:" + std::to_string(n));
    if (!out.empty()) std::cout << out << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace deltatune::cli
