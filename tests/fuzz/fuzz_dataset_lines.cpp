// libFuzzer: dataset files (JSONL or a JSON array) in every format, then each accepted row tokenized as
// the trainer would (chat rows through a Qwen3.5-style template with tools, reasoning and content parts).
// The first input byte picks the declared `type` (low bits), train_on_inputs (0x40) and skip_bad_rows (0x80);
// the rest is the file's text.
// Bad input must end in deltatune::Error; rows that parse must satisfy the reader's promises.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/pipeline.h"
#include "data/tokenizer.h"
#include "io/files.h"

namespace {

using namespace deltatune;

// The demo model's tokenizer (small, ChatML specials) and the reconstructed Qwen3.5 template fixture,
// loaded once: they are the fixed part of the pipeline, the data is what is fuzzed.
struct Fixture {
  Tokenizer tok;
  ChatTemplate tpl;
  int32_t eos;
  Fixture()
      : tok(Tokenizer::from_file(std::string(DT_SOURCE_DIR) + "/resources/demo/model/tokenizer.json")),
        tpl(read_text_file(std::string(DT_SOURCE_DIR) + "/tests/goldens/chat/qwen3_5_reconstructed.jinja"),
            "<|im_end|>"),
        eos(tok.token_to_id("<|im_end|>")) {}
};

const char* const kTypes[] = {"", "chat", "messages", "sharegpt", "alpaca", "completion", "pretokenized"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  if (size < 1 || size > (1u << 16)) return 0;
  const std::string type = kTypes[(data[0] & 7) % 7];  // low 3 bits: the type (7 = detect, like 0)
  const bool skip_bad_rows = data[0] & 0x80;
  const bool train_on_inputs = data[0] & 0x40;
  DatasetFile file;
  try {
    file = dataset_parse_text(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "f.jsonl", type,
                              skip_bad_rows);
  } catch (const Error&) {
    return 0;
  }
  if (!dataset_type_valid(file.format)) std::abort();
  if (file.total_rows != static_cast<int64_t>(file.rows.size()) + file.skipped_rows) std::abort();
  if (!skip_bad_rows && file.skipped_rows != 0) std::abort();
  for (const DatasetRow& row : file.rows) {
    if (row.source.rfind("f.jsonl:", 0) != 0) std::abort();
    if (row.kind == RowKind::kPretokenized && !row.labels.empty() && row.labels.size() != row.input_ids.size())
      std::abort();
    if (row.kind == RowKind::kChat && (!row.messages.is_array() || row.messages.empty())) std::abort();
    try {
      const Example ex = data_encode_row(fx.tok, &fx.tpl, row, train_on_inputs, fx.eos);
      if (ex.labels.size() != ex.input_ids.size()) std::abort();
    } catch (const Error&) {
      // A row the reader accepts may still be refused by the template (e.g. raise_exception) or the
      // tokenizer (an id outside the vocabulary): that is a clean error, not a crash.
    }
  }
  return 0;
}
