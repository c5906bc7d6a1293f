// Chat rendering with a checkpoint's own template (see data/jinja) and assistant-span label masking.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace deltatune {

namespace jinja {
class Template;
}
class Tokenizer;

struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // passed to the template only when set (as HF kwargs)
};

class ChatTemplate {
 public:
  // The template of a checkpoint folder: chat_template.jinja if present, else tokenizer_config.json's
  // "chat_template" (a string, or a list of {name, template} of which "default" is used). Special token
  // strings (bos/eos/pad/unk) come from tokenizer_config.json. Throws Error if there is no template.
  static ChatTemplate from_model_dir(const std::string& dir);
  ChatTemplate(const std::string& source, std::string eos_token = "", std::string bos_token = "",
               std::string pad_token = "", std::string unk_token = "", std::string name = "chat template");
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // As HF apply_chat_template(messages, tools=tools, tokenize=False, ...). `messages` is a JSON array
  // of message objects; `tools` an array or null. Reasoning under "thinking"/"reasoning" is aliased to
  // "reasoning_content" as transformers does. Throws Error (with the template line) on failure.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     const ChatOptions& opts) const;

  const std::string& source() const { return source_; }
  const std::string& eos_token() const { return eos_; }
  std::string content_hash() const;

 private:
  std::string source_, eos_, bos_, pad_, unk_, name_;
  std::unique_ptr<jinja::Template> tpl_;
};

// A conversation rendered and tokenized, with the per-token training mask.
struct ChatEncoding {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;        // ids where trained, -100 elsewhere
  std::vector<int64_t> token_starts;  // byte offset of each token in text
  std::vector<int64_t> token_ends;
  std::vector<std::pair<int64_t, int64_t>> assistant_spans;  // [begin, end) byte ranges trained
};

// Renders `messages` (add_generation_prompt=false) and marks trained tokens: with train_on_inputs all
// tokens; otherwise, per assistant message, from the first token after its role header (the first line
// of the generation prompt, e.g. "<|im_start|>assistant\n") through the first special token after it
// (e.g. <|im_end|>), inclusive, and never past the turn's end (where messages[:i+1] rendered alone ends, when
// the full render starts with it: an end marker that is no special token in this vocabulary stops there). The
// header position comes from rendering the conversation prefix (messages[:i]) with and without the generation
// prompt; if the full render does not start with the prefix (templates that re-render earlier turns, e.g.
// dropping old reasoning), the header is searched after the previous assistant span. Throws Error when an
// assistant turn cannot be located.
ChatEncoding chat_encode(const Tokenizer& tok, const ChatTemplate& tpl,
                         const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                         const ChatOptions& opts, bool train_on_inputs);

}  // namespace deltatune
