// The text of one generated answer as it grows token by token: what may be shown so far (never a partial
// UTF-8 character, never the start of what may become a stop string) and where a stop string ends it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

class Tokenizer;

class TextStream {
 public:
  // tok may be null (no tokenizer: no text, stop strings never match).
  TextStream(const Tokenizer* tok, std::vector<std::string> stops);
  // Adds a generated token; returns the newly showable text. Sets `stopped` when a stop string appeared (the
  // text then ends before it).
  std::string push(int32_t id, bool& stopped);
  // The rest of the text once generation ended for another reason.
  std::string finish();
  const std::string& text() const { return shown_; }

 private:
  const Tokenizer* tok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> ids_;
  std::string full_, shown_;
};

}  // namespace deltatune
