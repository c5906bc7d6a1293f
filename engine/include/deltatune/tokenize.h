// `deltatune tokenize`: JSON lines in, token ids (and training labels) out, with a checkpoint's tokenizer and
// chat template exactly as training renders them.
#pragma once
#include <memory>
#include <optional>
#include <string>

namespace deltatune {

struct TokenizeOptions {
  bool chat = false;                    // lines are {"messages": [...], "tools"?: [...]} rendered by the template
  bool add_generation_prompt = false;   // default for lines that do not say
  std::optional<bool> enable_thinking;  // default for lines that do not say (unset: the template's default)
  bool train_on_inputs = false;         // labels on every token, not only assistant turns
};

class JsonlTokenizer {
 public:
  // Loads tokenizer.json (and with opts.chat the chat template) of the checkpoint folder `model_dir`.
  // Throws deltatune::Error naming the file.
  JsonlTokenizer(const std::string& model_dir, const TokenizeOptions& opts);
  ~JsonlTokenizer();
  JsonlTokenizer(const JsonlTokenizer&) = delete;
  JsonlTokenizer& operator=(const JsonlTokenizer&) = delete;

  // One input line -> one output JSON line (no newline); "" for a blank line. Plain: {"text": ...} ->
  // {"ids": [...]}. Chat: {"messages", "tools"?, "add_generation_prompt"?, "enable_thinking"?} ->
  // {"text": rendered, "ids": [...], "labels": [...]} (labels -100 where not trained). `where` names the
  // line in errors ("stdin:3").
  std::string tokenize_line(const std::string& line, const std::string& where) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltatune
