// Reads dataset files (JSONL, or a JSON array) in the formats people already have and normalizes each
// row into one of three kinds: a chat conversation, a completion text, or pre-tokenized ids.
//
// Formats (`type` in the run file, or detected from the first row's fields):
//   chat         {"messages": [{"role", "content"}...], "tools"?: [...]}   roles
//   system/user/assistant/tool/developer sharegpt     {"conversations": [{"from", "value"}...]} from
//   human|user, gpt|assistant|model,
//                                                                           system, tool|function|observation
//   alpaca       {"instruction", "input"?, "output", "system"?}            rendered as a chat: user =
//   instruction,
//                                                                           + "\n\n" + input when input is
//                                                                           not empty; assistant = output
//   completion   {"text"}                                                  EOS appended, every token trained
//   pretokenized {"input_ids": [...], "labels"?: [...]}                    used as is (no labels: all
//   trained)
// Bad rows (malformed JSON, missing field, wrong type, empty conversation, unknown role, invalid UTF-8)
// throw Error("file:line: reason"), or with skip_bad_rows are skipped and counted.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deltatune {

enum class RowKind { kChat, kCompletion, kPretokenized };

struct DatasetRow {
  std::string source;  // "file:line"
  RowKind kind = RowKind::kChat;
  nlohmann::ordered_json messages;         // kChat: normalized [{"role","content",...}]
  nlohmann::ordered_json tools;            // kChat: null or array
  std::string text;                        // kCompletion
  std::vector<int32_t> input_ids, labels;  // kPretokenized (labels empty = all trained)
};

struct DatasetFile {
  std::string path;
  std::string format;  // chat | sharegpt | alpaca | completion | pretokenized
  std::vector<DatasetRow> rows;
  int64_t total_rows = 0;  // rows seen (including skipped)
  int64_t skipped_rows = 0;
  std::vector<std::string> skipped_reasons;  // the first few "file:line: reason"
};

// Valid `type` values ("" = detect).
bool dataset_type_valid(const std::string& type);
// Throws Error naming `path` when it is missing, a directory or not a regular file.
void dataset_check_file(const std::string& path);
// Throws Error naming the file when it has no rows at all, or when every row is bad (skip_bad_rows).
DatasetFile dataset_read(const std::string& path, const std::string& type, bool skip_bad_rows);
// dataset_read on text already in memory (`path` only names the rows' sources). Used by dataset_read and
// by the fuzz target, so the parser is fuzzed without a file system round trip.
DatasetFile dataset_parse_text(std::string content, const std::string& path, const std::string& type,
                               bool skip_bad_rows);
// Normalizes one parsed row (throws Error with `source` on a bad row); `format` "" detects it.
DatasetRow dataset_parse_row(const nlohmann::ordered_json& row, const std::string& format,
                             const std::string& source);
// The format a row's fields suggest ("" when none fits).
std::string dataset_detect_format(const nlohmann::ordered_json& row);

}  // namespace deltatune
