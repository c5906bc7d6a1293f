#include "decode/text_stream.h"

#include <algorithm>

#include "data/tokenizer.h"

namespace deltatune {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: what a partial UTF-8 token decodes to
}

TextStream::TextStream(const Tokenizer* tok, std::vector<std::string> stops) : tok_(tok), stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string TextStream::push(int32_t id, bool& stopped) {
  stopped = false;
  if (!tok_) return {};
  ids_.push_back(id);
  full_ = tok_->decode(ids_, /*skip_special_tokens=*/true);
  // The first stop string in the text (the shown part never holds a whole one: it would have stopped there).
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, full_.find(s));
  if (cut != std::string::npos) {
    stopped = true;
    std::string delta = cut > shown_.size() ? full_.substr(shown_.size(), cut - shown_.size()) : std::string();
    shown_ = full_.substr(0, std::max(cut, shown_.size()));
    return delta;
  }
  size_t safe = full_.size();
  if (std::string_view(full_).ends_with(kReplacement)) safe -= kReplacement.size();  // may complete later
  for (const auto& s : stops_)  // hold back a tail that may be the start of a stop string
    for (size_t n = std::min(s.size() - 1, safe); n > 0; --n)
      if (full_.compare(safe - n, n, s, 0, n) == 0) {
        safe -= n;
        break;
      }
  if (safe <= shown_.size() || full_.compare(0, shown_.size(), shown_) != 0) return {};
  std::string delta = full_.substr(shown_.size(), safe - shown_.size());
  shown_ = full_.substr(0, safe);
  return delta;
}

std::string TextStream::finish() {
  if (full_.size() <= shown_.size() || full_.compare(0, shown_.size(), shown_) != 0) return {};
  std::string delta = full_.substr(shown_.size());
  shown_ = full_;
  return delta;
}

}  // namespace deltatune
