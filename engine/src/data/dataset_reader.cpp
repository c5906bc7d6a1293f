#include "data/dataset_reader.h"

#include <cctype>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/utf8.h"
#include "io/files.h"

namespace deltatune {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& reason) {
  throw Error(source + ": " + reason);
}

const ojson& field(const ojson& row, const char* key, const std::string& source, const std::string& format) {
  auto it = row.find(key);
  if (it == row.end()) bad(source, std::string("missing field '") + key + "' (" + format + " format)");
  return *it;
}

std::string string_field(const ojson& row, const char* key, const std::string& source,
                         const std::string& format, bool required = true) {
  auto it = row.find(key);
  if (it == row.end()) {
    if (required) bad(source, std::string("missing field '") + key + "' (" + format + " format)");
    return "";
  }
  if (it->is_null()) {
    if (required)
      bad(source, std::string("field '") + key + "' must be a string, got null (" + format + " format)");
    return "";
  }
  if (!it->is_string())
    bad(source, std::string("field '") + key + "' must be a string, got " + it->type_name());
  return it->get<std::string>();
}

ojson message(const std::string& role, const std::string& content) {
  ojson m = ojson::object();
  m["role"] = role;
  m["content"] = content;
  return m;
}

ojson parse_chat(const ojson& row, const std::string& source) {
  const ojson& msgs = field(row, "messages", source, "chat");
  if (!msgs.is_array())
    bad(source, std::string("field 'messages' must be an array, got ") + msgs.type_name());
  if (msgs.empty()) bad(source, "empty conversation (messages is [])");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ojson& m = msgs[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(source, where + " must be an object, got " + m.type_name());
    auto role = m.find("role");
    if (role == m.end()) bad(source, "missing field '" + where + ".role'");
    if (!role->is_string()) bad(source, where + ".role must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      bad(source,
          "unknown role '" + r + "' in " + where + " (expected system, user, assistant, tool or developer)");
    auto content = m.find("content");
    if (content == m.end()) {
      if (!(r == "assistant" && m.contains("tool_calls")))
        bad(source, "missing field '" + where + ".content'");
    } else if (!content->is_string() && !content->is_array() && !content->is_null()) {
      bad(source, where + ".content must be a string or a list of parts, got " + content->type_name());
    }
  }
  return msgs;
}

ojson parse_sharegpt(const ojson& row, const std::string& source) {
  const ojson& conv = field(row, "conversations", source, "sharegpt");
  if (!conv.is_array())
    bad(source, std::string("field 'conversations' must be an array, got ") + conv.type_name());
  if (conv.empty()) bad(source, "empty conversation (conversations is [])");
  ojson out = ojson::array();
  const std::string system = string_field(row, "system", source, "sharegpt", false);
  if (!system.empty()) out.push_back(message("system", system));
  for (size_t i = 0; i < conv.size(); ++i) {
    const ojson& t = conv[i];
    const std::string where = "conversations[" + std::to_string(i) + "]";
    if (!t.is_object()) bad(source, where + " must be an object, got " + t.type_name());
    const std::string from = string_field(t, "from", source + " " + where, "sharegpt");
    const std::string value = string_field(t, "value", source + " " + where, "sharegpt");
    std::string role;
    if (from == "human" || from == "user")
      role = "user";
    else if (from == "gpt" || from == "assistant" || from == "model")
      role = "assistant";
    else if (from == "system")
      role = "system";
    else if (from == "tool" || from == "function" || from == "observation")
      role = "tool";
    else
      bad(source, "unknown role '" + from + "' in " + where +
                      ".from (expected human, user, gpt, assistant, model, system, tool, function or "
                      "observation)");
    out.push_back(message(role, value));
  }
  return out;
}

ojson parse_alpaca(const ojson& row, const std::string& source) {
  const std::string instruction = string_field(row, "instruction", source, "alpaca");
  const std::string input = string_field(row, "input", source, "alpaca", false);
  const std::string output = string_field(row, "output", source, "alpaca");
  const std::string system = string_field(row, "system", source, "alpaca", false);
  ojson out = ojson::array();
  if (!system.empty()) out.push_back(message("system", system));
  out.push_back(message("user", input.empty() ? instruction : instruction + "\n\n" + input));
  out.push_back(message("assistant", output));
  return out;
}

std::vector<int32_t> int_array(const ojson& a, const char* name, const std::string& source,
                               bool allow_negative) {
  if (!a.is_array())
    bad(source, std::string("field '") + name + "' must be an array of integers, got " + a.type_name());
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const ojson& x = a[i];
    if (!x.is_number_integer())
      bad(source, std::string(name) + "[" + std::to_string(i) + "] must be an integer");
    const int64_t v = x.get<int64_t>();
    if (v > std::numeric_limits<int32_t>::max() || (v < 0 && !(allow_negative && v == -100)))
      bad(source,
          std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) + " is out of range");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// Line number (1-based) of the start of each top-level element of a JSON array text.
std::vector<int64_t> array_element_lines(const std::string& s) {
  std::vector<int64_t> lines;
  int64_t line = 1;
  int depth = 0;
  bool in_str = false, esc = false, expect_value = false;
  for (char c : s) {
    if (c == '\n') ++line;
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (depth == 1 && expect_value && c != ']') {
      lines.push_back(line);
      expect_value = false;
    }
    if (c == '"')
      in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth == 1) expect_value = true;
    } else if (c == ']' || c == '}')
      --depth;
    else if (c == ',' && depth == 1)
      expect_value = true;
  }
  return lines;
}

int64_t line_of_offset(const std::string& s, size_t off) {
  int64_t line = 1;
  for (size_t i = 0; i < off && i < s.size(); ++i)
    if (s[i] == '\n') ++line;
  return line;
}

}  // namespace

bool dataset_type_valid(const std::string& type) {
  return type.empty() || type == "chat" || type == "messages" || type == "sharegpt" || type == "alpaca" ||
         type == "completion" || type == "pretokenized";
}

std::string dataset_detect_format(const ojson& row) {
  if (!row.is_object()) return "";
  if (row.contains("messages")) return "chat";
  if (row.contains("conversations")) return "sharegpt";
  if (row.contains("input_ids")) return "pretokenized";
  if (row.contains("instruction") && row.contains("output")) return "alpaca";
  if (row.contains("text")) return "completion";
  return "";
}

DatasetRow dataset_parse_row(const ojson& row, const std::string& format_in, const std::string& source) {
  if (!row.is_object()) bad(source, std::string("expected a JSON object, got ") + row.type_name());
  std::string format = format_in == "messages" ? "chat" : format_in;
  if (format.empty()) format = dataset_detect_format(row);
  if (format.empty())
    bad(source,
        "cannot tell the format: expected one of the fields messages, conversations, instruction+output, "
        "text, input_ids");
  DatasetRow out;
  out.source = source;
  if (format == "chat") {
    out.kind = RowKind::kChat;
    out.messages = parse_chat(row, source);
    auto tools = row.find("tools");
    if (tools != row.end() && !tools->is_null()) {
      if (!tools->is_array())
        bad(source, std::string("field 'tools' must be an array, got ") + tools->type_name());
      out.tools = *tools;
    }
  } else if (format == "sharegpt") {
    out.kind = RowKind::kChat;
    out.messages = parse_sharegpt(row, source);
  } else if (format == "alpaca") {
    out.kind = RowKind::kChat;
    out.messages = parse_alpaca(row, source);
  } else if (format == "completion") {
    out.kind = RowKind::kCompletion;
    out.text = string_field(row, "text", source, "completion");
  } else if (format == "pretokenized") {
    out.kind = RowKind::kPretokenized;
    out.input_ids = int_array(field(row, "input_ids", source, "pretokenized"), "input_ids", source, false);
    if (out.input_ids.empty()) bad(source, "field 'input_ids' is empty (expected at least one token id)");
    auto labels = row.find("labels");
    if (labels != row.end() && !labels->is_null()) {
      out.labels = int_array(*labels, "labels", source, true);
      if (out.labels.size() != out.input_ids.size())
        bad(source, "labels has " + std::to_string(out.labels.size()) + " entries but input_ids has " +
                        std::to_string(out.input_ids.size()));
    }
  } else {
    bad(source, "unknown dataset type '" + format + "'");
  }
  return out;
}

void dataset_check_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  check(std::filesystem::exists(st), path + ": dataset file not found");
  check(!std::filesystem::is_directory(st),
        path + ": is a directory (expected a dataset file: JSONL, or a JSON array)");
  check(std::filesystem::is_regular_file(st),
        path + ": not a regular file (expected a dataset file: JSONL, or a JSON array)");
}

DatasetFile dataset_read(const std::string& path, const std::string& type, bool skip_bad_rows) {
  check(dataset_type_valid(type), path + ": unknown dataset type '" + type +
                                      "' (expected chat, sharegpt, alpaca, completion or pretokenized)");
  dataset_check_file(path);
  return dataset_parse_text(read_text_file(path), path, type, skip_bad_rows);
}

DatasetFile dataset_parse_text(std::string content, const std::string& path, const std::string& type,
                               bool skip_bad_rows) {
  check(dataset_type_valid(type), path + ": unknown dataset type '" + type +
                                      "' (expected chat, sharegpt, alpaca, completion or pretokenized)");
  if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) content.erase(0, 3);  // UTF-8 byte order mark
  DatasetFile out;
  out.path = path;
  out.format = type == "messages" ? "chat" : type;
  auto handle = [&](const std::string& source, const auto& parse_fn) {
    ++out.total_rows;
    try {
      DatasetRow r = parse_fn();
      out.rows.push_back(std::move(r));
    } catch (const Error& e) {
      if (!skip_bad_rows) throw;
      ++out.skipped_rows;
      if (out.skipped_reasons.size() < 20) out.skipped_reasons.push_back(e.what());
    }
  };
  auto settle_format = [&](const ojson& row) {
    if (out.format.empty()) out.format = dataset_detect_format(row);
  };

  size_t first = 0;
  while (first < content.size() && std::isspace(static_cast<unsigned char>(content[first]))) ++first;
  if (first < content.size() && content[first] == '[') {
    const size_t bad_at = utf8_find_invalid(content);
    if (bad_at != std::string::npos)
      throw Error(path + ":" + std::to_string(line_of_offset(content, bad_at)) + ": invalid UTF-8 (byte " +
                  std::to_string(bad_at) + ")");
    ojson arr;
    try {
      arr = ojson::parse(content);
    } catch (const ojson::parse_error& e) {
      throw Error(path + ":" + std::to_string(line_of_offset(content, e.byte > 0 ? e.byte - 1 : 0)) +
                  ": malformed JSON: " + e.what());
    } catch (const ojson::exception& e) {
      // Not a syntax error but still bad data, e.g. a number too large for a double (out_of_range.406).
      throw Error(path + ": malformed JSON: " + e.what());
    }
    const auto lines = array_element_lines(content);
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string source = path + ":" + std::to_string(i < lines.size() ? lines[i] : 0);
      settle_format(arr[i]);
      handle(source, [&] { return dataset_parse_row(arr[i], out.format, source); });
    }
  } else {
    size_t pos = 0;
    int64_t line = 0;
    while (pos < content.size()) {
      size_t nl = content.find('\n', pos);
      if (nl == std::string::npos) nl = content.size();
      std::string text = content.substr(pos, nl - pos);
      pos = nl + 1;
      ++line;
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (text.find_first_not_of(" \t") == std::string::npos) continue;
      const std::string source = path + ":" + std::to_string(line);
      handle(source, [&] {
        const size_t bad_at = utf8_find_invalid(text);
        if (bad_at != std::string::npos)
          bad(source, "invalid UTF-8 at byte " + std::to_string(bad_at) + " of the line");
        ojson row;
        try {
          row = ojson::parse(text);
        } catch (const ojson::exception& e) {  // syntax, and numbers too large for a double
          bad(source, std::string("malformed JSON: ") + e.what());
        }
        settle_format(row);
        return dataset_parse_row(row, out.format, source);
      });
    }
  }
  if (out.format.empty()) out.format = "chat";
  check(out.total_rows > 0,
        path +
            ": no rows (an empty file or JSON array; expected JSONL, one JSON object a line, or a JSON "
            "array of objects)");
  if (out.rows.empty()) {
    std::string msg =
        path + ": every row is bad (" + std::to_string(out.skipped_rows) + " skipped with skip_bad_rows)";
    if (!out.skipped_reasons.empty()) msg += "; first: " + out.skipped_reasons.front();
    throw Error(msg);
  }
  return out;
}

}  // namespace deltatune
