// Run YAML <-> RunConfig. Table-driven: one Field per key holds its parser, its value check and its YAML
// writer, so parsing, validation, the canonical output and config diffs cannot disagree about the keys.
//
// Path rule: a relative base_model, dataset path, lora_model_dir or resume_from_checkpoint is resolved
// against the YAML file's folder when it exists there, and kept as written (relative to the working
// directory) otherwise. A relative output_dir or dataset_prepared_path (folders that usually do not exist
// yet) is always resolved against the YAML file's folder, so outputs land in the same place whatever the
// working directory. Only keys written in the file are resolved; defaults stay as they are. Parsing a
// string with base_dir "" or "." resolves nothing.
#include "deltatune/run_config.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

// A value that does not fit its key; the caller adds where and which key.
struct BadValue {
  std::string value;
  std::string subkey;    // e.g. "[1].type" inside a list
  std::string expected;  // overrides the field's expected text when set
};

struct Problem {
  std::string subkey, value, expected;
};

enum class PathKind { None, Input, Output };

struct Field {
  std::string key;
  std::string expected;
  PathKind path_kind = PathKind::None;
  std::function<void(const YAML::Node&, RunConfig&)> parse;  // throws BadValue
  std::function<std::optional<Problem>(const RunConfig&)> check;
  std::function<void(YAML::Emitter&, const RunConfig&)> emit;
  std::function<void(RunConfig&, const std::function<std::string(const std::string&, PathKind)>&)> resolve;
};

// Optimal string alignment distance (Levenshtein plus adjacent transpositions): typos swap letters.
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

// The closest candidate when it is close enough to be a plausible typo, else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// Built by appending: GCC 12 warns (-Wrestrict, falsely) on "[" + std::to_string(i) + "]".
std::string index_key(size_t i) {
  std::string s(1, '[');
  s += std::to_string(i);
  s += ']';
  return s;
}

std::string flow_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

// A scalar's text. Invalid UTF-8 is refused: the YAML writer would replace it, so the config would not
// survive its own canonical form (found by fuzz_run_yaml).
std::string scalar_of(const YAML::Node& n, const std::string& subkey = "") {
  if (!n.IsScalar()) throw BadValue{flow_text(n), subkey, ""};
  if (utf8_find_invalid(n.Scalar()) != std::string::npos)
    throw BadValue{utf8_make_valid(n.Scalar()), subkey, "valid UTF-8 text"};
  return n.Scalar();
}

int64_t parse_int(const YAML::Node& n) {
  std::string s = scalar_of(n);
  const char* b = s.data();
  if (!s.empty() && s[0] == '+') ++b;
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || b == s.data() + s.size()) throw BadValue{s, "", ""};
  return v;
}

double parse_real(const YAML::Node& n) {
  std::string s = scalar_of(n);
  const char* b = s.data();
  if (!s.empty() && s[0] == '+') ++b;
  double v = 0;
  const auto [p, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || b == s.data() + s.size() || !std::isfinite(v))
    throw BadValue{s, "", ""};
  return v;
}

bool parse_bool(const YAML::Node& n) {
  const std::string s = scalar_of(n);
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "true" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "no" || l == "off") return false;
  throw BadValue{s, "", ""};
}

// Shortest text that reads back as exactly the same double.
std::string format_real(double v) {
  char buf[64];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  // "32" would read back fine, but "32.0" tells a reader the key is a real number.
  if (s.find_first_of(".eE") == std::string::npos && s.find("inf") == std::string::npos &&
      s.find("nan") == std::string::npos)
    s += ".0";
  return s;
}

bool null_like(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

void emit_string(YAML::Emitter& out, const std::string& s) {
  // Plain "" or "null" would read back as null (= the default), so quote those.
  if (null_like(s)) out << YAML::DoubleQuoted;
  out << s;
}

std::vector<std::string> parse_string_list(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    out.push_back(scalar_of(n));
    return out;
  }
  if (!n.IsSequence()) throw BadValue{flow_text(n), "", ""};
  for (size_t i = 0; i < n.size(); ++i) {
    out.push_back(scalar_of(n[i], index_key(i)));
  }
  return out;
}

std::string choices_text(const std::vector<std::string>& choices) {
  std::vector<std::string> shown;
  for (const auto& c : choices) shown.push_back(c.empty() ? "\"\"" : c);
  return "one of " + join(shown);
}

std::optional<Problem> check_choice(const std::string& v, const std::vector<std::string>& choices,
                                    const std::string& subkey = "") {
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return std::nullopt;
  std::string expected = choices_text(choices);
  const std::string guess = closest(v, choices);
  if (!guess.empty()) expected += "; did you mean '" + guess + "'?";
  return Problem{subkey, v, expected};
}

template <class T>
Field integer(const char* key, T RunConfig::*m, std::function<bool(int64_t)> ok, std::string expected) {
  Field f;
  f.key = key;
  f.expected = std::move(expected);
  f.parse = [m](const YAML::Node& n, RunConfig& c) {
    const int64_t v = parse_int(n);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      throw BadValue{n.Scalar(), "", ""};
    c.*m = static_cast<T>(v);
  };
  f.check = [m, ok](const RunConfig& c) -> std::optional<Problem> {
    if (ok(c.*m)) return std::nullopt;
    return Problem{"", std::to_string(c.*m), ""};
  };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) { out << static_cast<long long>(c.*m); };
  return f;
}

Field real(const char* key, double RunConfig::*m, std::function<bool(double)> ok, std::string expected) {
  Field f;
  f.key = key;
  f.expected = std::move(expected);
  f.parse = [m](const YAML::Node& n, RunConfig& c) { c.*m = parse_real(n); };
  f.check = [m, ok](const RunConfig& c) -> std::optional<Problem> {
    if (std::isfinite(c.*m) && ok(c.*m)) return std::nullopt;
    return Problem{"", format_real(c.*m), ""};
  };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) { out << format_real(c.*m); };
  return f;
}

Field boolean(const char* key, bool RunConfig::*m) {
  Field f;
  f.key = key;
  f.expected = "true or false";
  f.parse = [m](const YAML::Node& n, RunConfig& c) { c.*m = parse_bool(n); };
  f.check = [](const RunConfig&) { return std::optional<Problem>(); };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) { out << (c.*m ? "true" : "false"); };
  return f;
}

// A string; `choices` empty = any string.
Field text(const char* key, std::string RunConfig::*m, std::vector<std::string> choices = {},
           PathKind path_kind = PathKind::None, bool non_empty = false) {
  Field f;
  f.key = key;
  f.expected = choices.empty() ? (non_empty ? "a non-empty string" : "a string") : choices_text(choices);
  f.path_kind = path_kind;
  f.parse = [m](const YAML::Node& n, RunConfig& c) { c.*m = scalar_of(n); };
  f.check = [m, choices, non_empty](const RunConfig& c) -> std::optional<Problem> {
    if (!choices.empty()) return check_choice(c.*m, choices);
    if (non_empty && (c.*m).empty()) return Problem{"", "\"\"", ""};
    return std::nullopt;
  };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) { emit_string(out, c.*m); };
  if (path_kind != PathKind::None)
    f.resolve = [m, path_kind](RunConfig& c,
                               const std::function<std::string(const std::string&, PathKind)>& r) {
      c.*m = r(c.*m, path_kind);
    };
  return f;
}

// A list of strings; a single string is a one-element list.
Field list(const char* key, std::vector<std::string> RunConfig::*m, std::vector<std::string> choices = {}) {
  Field f;
  f.key = key;
  f.expected = choices.empty() ? "a list of non-empty strings" : "a list of " + choices_text(choices);
  f.parse = [m](const YAML::Node& n, RunConfig& c) { c.*m = parse_string_list(n); };
  f.check = [m, choices](const RunConfig& c) -> std::optional<Problem> {
    const auto& v = c.*m;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string sub = index_key(i);
      if (!choices.empty()) {
        if (auto p = check_choice(v[i], choices, sub)) return p;
      } else if (v[i].empty()) {
        return Problem{sub, "\"\"", "a non-empty string"};
      }
    }
    return std::nullopt;
  };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& s : c.*m) emit_string(out, s);
    out << YAML::EndSeq;
  };
  return f;
}

// gradient_checkpointing: auto | true | false | N (a number of layers: true with gradient_checkpointing_layers N).
// Emitted as auto, true or false (N goes to gradient_checkpointing_layers).
Field checkpointing(const char* key) {
  Field f;
  f.key = key;
  f.expected = "auto, true, false or a number of layers >= 0";
  f.parse = [](const YAML::Node& n, RunConfig& c) {
    const std::string s = scalar_of(n);
    if (s == "auto") {
      c.gradient_checkpointing_auto = true;
      return;
    }
    c.gradient_checkpointing_auto = false;
    if (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) {
      const int64_t v = parse_int(n);
      c.gradient_checkpointing = v > 0;
      c.gradient_checkpointing_layers = v > 0 ? v : -1;
      return;
    }
    c.gradient_checkpointing = parse_bool(n);
  };
  f.check = [](const RunConfig&) { return std::optional<Problem>(); };  // with the layers: check_combination
  f.emit = [](YAML::Emitter& out, const RunConfig& c) {
    out << (c.gradient_checkpointing_auto ? "auto" : c.gradient_checkpointing ? "true" : "false");
  };
  return f;
}

// gpus: a list of GPU indices, or `all`; emitted as `all` or a flow list ([] = one GPU, the `gpu` key).
Field gpu_list(const char* key) {
  Field f;
  f.key = key;
  f.expected = "a list of distinct GPU indices >= 0 (e.g. [0, 1]) or all";
  f.parse = [](const YAML::Node& n, RunConfig& c) {
    c.gpus.clear();
    c.gpus_all = false;
    if (n.IsScalar() && n.Scalar() == "all") {
      c.gpus_all = true;
      return;
    }
    if (n.IsScalar()) {
      const int64_t v = parse_int(n);
      if (v < 0 || v > std::numeric_limits<int>::max()) throw BadValue{n.Scalar(), "", ""};
      c.gpus.push_back(static_cast<int>(v));
      return;
    }
    if (!n.IsSequence()) throw BadValue{flow_text(n), "", ""};
    for (size_t i = 0; i < n.size(); ++i) {
      int64_t v = -1;
      try {
        v = parse_int(n[i]);
      } catch (const BadValue& b) {
        throw BadValue{b.value, index_key(i), "a GPU index >= 0"};
      }
      if (v < 0 || v > std::numeric_limits<int>::max()) throw BadValue{flow_text(n[i]), index_key(i), "a GPU index >= 0"};
      c.gpus.push_back(static_cast<int>(v));
    }
  };
  f.check = [](const RunConfig& c) -> std::optional<Problem> {
    if (c.gpus_all && !c.gpus.empty()) return Problem{"", "all", "either all or a list, not both"};
    for (size_t i = 0; i < c.gpus.size(); ++i) {
      if (c.gpus[i] < 0) return Problem{index_key(i), std::to_string(c.gpus[i]), "a GPU index >= 0"};
      for (size_t j = 0; j < i; ++j)
        if (c.gpus[j] == c.gpus[i])
          return Problem{index_key(i), std::to_string(c.gpus[i]), "distinct GPU indices (it is listed twice)"};
    }
    return std::nullopt;
  };
  f.emit = [](YAML::Emitter& out, const RunConfig& c) {
    if (c.gpus_all) {
      out << "all";
      return;
    }
    out << YAML::Flow << YAML::BeginSeq;
    for (int g : c.gpus) out << g;
    out << YAML::EndSeq;
  };
  return f;
}

const std::vector<std::string> kDatasetKeys = {"path", "type", "split"};
const std::vector<std::string> kDatasetTypes = {"",       "chat",       "sharegpt",
                                                "alpaca", "completion", "pretokenized"};
const std::vector<std::string> kDatasetSplits = {"", "train", "validation"};

DatasetSpec parse_dataset(const YAML::Node& n, const std::string& sub) {
  DatasetSpec d;
  if (n.IsScalar()) {
    d.path = scalar_of(n, sub);
    return d;
  }
  if (!n.IsMap()) throw BadValue{flow_text(n), sub, "a mapping {path, type, split} or a path"};
  std::set<std::string> seen;
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (!seen.insert(k).second) throw BadValue{k, sub, "each key once (it appears twice)"};
    const YAML::Node& v = kv.second;
    if (std::find(kDatasetKeys.begin(), kDatasetKeys.end(), k) == kDatasetKeys.end()) {
      std::string expected = "keys " + join(kDatasetKeys) + " only (unknown key '" + k + "'";
      const std::string guess = closest(k, kDatasetKeys);
      if (!guess.empty()) expected += "; did you mean '" + guess + "'?";
      throw BadValue{k, sub, expected + ")"};
    }
    if (v.IsNull()) continue;
    (k == "path" ? d.path : k == "type" ? d.type : d.split) = scalar_of(v, sub + "." + k);
  }
  if (d.type == "messages") d.type = "chat";  // the dataset readers' alias: rows with a `messages` list
  if (!seen.count("path")) throw BadValue{flow_text(n), sub, "a 'path' key"};
  return d;
}

Field datasets(const char* key, std::vector<DatasetSpec> RunConfig::*m) {
  Field f;
  f.key = key;
  f.expected = "a list of {path, type, split}";
  f.path_kind = PathKind::Input;
  f.parse = [m](const YAML::Node& n, RunConfig& c) {
    std::vector<DatasetSpec> out;
    if (n.IsScalar() || n.IsMap()) {
      out.push_back(parse_dataset(n, "[0]"));
    } else if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) out.push_back(parse_dataset(n[i], index_key(i)));
    } else {
      throw BadValue{flow_text(n), "", ""};
    }
    c.*m = std::move(out);
  };
  f.check = [m](const RunConfig& c) -> std::optional<Problem> {
    const auto& v = c.*m;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string sub = index_key(i);
      if (v[i].path.empty()) return Problem{sub + ".path", "\"\"", "a non-empty path"};
      if (auto p = check_choice(v[i].type, kDatasetTypes, sub + ".type")) return p;
      if (auto p = check_choice(v[i].split, kDatasetSplits, sub + ".split")) return p;
    }
    return std::nullopt;
  };
  f.emit = [m](YAML::Emitter& out, const RunConfig& c) {
    if ((c.*m).empty()) out << YAML::Flow;  // "[]" on the key's line
    out << YAML::BeginSeq;
    for (const auto& d : c.*m) {
      out << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
      emit_string(out, d.path);
      if (!d.type.empty()) out << YAML::Key << "type" << YAML::Value << d.type;
      if (!d.split.empty()) out << YAML::Key << "split" << YAML::Value << d.split;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  };
  f.resolve = [m](RunConfig& c, const std::function<std::string(const std::string&, PathKind)>& r) {
    for (auto& d : c.*m) d.path = r(d.path, PathKind::Input);
  };
  return f;
}

// sample_prompts: each chat as a JSON array of {role, content}; a scalar key value is a JSONL file's path.
const std::vector<std::string> kMessageRoles = {"system", "user", "assistant", "tool"};

std::string chat_json_from_yaml(const YAML::Node& n, const std::string& sub) {
  nlohmann::ordered_json chat = nlohmann::ordered_json::array();
  if (n.IsScalar()) {
    chat.push_back({{"role", "user"}, {"content", scalar_of(n, sub)}});
    return chat.dump();
  }
  const YAML::Node list = n.IsMap() && n["messages"] ? n["messages"] : n;
  if (!list.IsSequence() || list.size() == 0)
    throw BadValue{flow_text(n), sub, "a chat: a list of {role, content}, {messages: [...]} or a string"};
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ms = sub + index_key(i);
    const YAML::Node& m = list[i];
    if (!m.IsMap() || !m["role"] || !m["content"] || m.size() != 2)
      throw BadValue{flow_text(m), ms, "a message {role, content}"};
    chat.push_back({{"role", scalar_of(m["role"], ms + ".role")}, {"content", scalar_of(m["content"], ms + ".content")}});
  }
  return chat.dump();
}

Field sample_prompts_field() {
  Field f;
  f.key = "sample_prompts";
  f.expected = "a list of chats (each a list of {role, content}, or a string) or a JSONL file";
  f.path_kind = PathKind::Input;
  f.parse = [](const YAML::Node& n, RunConfig& c) {
    c.sample_prompts.clear();
    c.sample_prompts_file.clear();
    if (n.IsScalar()) {
      c.sample_prompts_file = scalar_of(n);
      return;
    }
    if (!n.IsSequence()) throw BadValue{flow_text(n), "", ""};
    for (size_t i = 0; i < n.size(); ++i) c.sample_prompts.push_back(chat_json_from_yaml(n[i], index_key(i)));
  };
  f.check = [](const RunConfig& c) -> std::optional<Problem> {
    for (size_t i = 0; i < c.sample_prompts.size(); ++i) {
      const auto chat = nlohmann::json::parse(c.sample_prompts[i], nullptr, false);
      const std::string sub = index_key(i);
      if (chat.is_discarded() || !chat.is_array() || chat.empty())
        return Problem{sub, c.sample_prompts[i], "a non-empty JSON array of {role, content} messages"};
      for (size_t j = 0; j < chat.size(); ++j) {
        const auto& m = chat[j];
        const std::string ms = sub + index_key(j);
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
          return Problem{ms, m.dump(), "a message {role, content}"};
        if (auto p = check_choice(m["role"].get<std::string>(), kMessageRoles, ms + ".role")) return p;
      }
    }
    if (!c.sample_prompts.empty() && !c.sample_prompts_file.empty())
      return Problem{"", c.sample_prompts_file, "a list of chats or a file, not both"};
    return std::nullopt;
  };
  f.emit = [](YAML::Emitter& out, const RunConfig& c) {
    if (!c.sample_prompts_file.empty()) {
      emit_string(out, c.sample_prompts_file);
      return;
    }
    if (c.sample_prompts.empty()) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (const std::string& text : c.sample_prompts) {
      const auto chat = nlohmann::json::parse(text, nullptr, false);
      out << YAML::BeginSeq;
      if (chat.is_array())
        for (const auto& m : chat) {
          out << YAML::Flow << YAML::BeginMap;
          for (const char* k : {"role", "content"}) {
            out << YAML::Key << k << YAML::Value;
            emit_string(out, m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string());
          }
          out << YAML::EndMap;
        }
      out << YAML::EndSeq;
    }
    out << YAML::EndSeq;
  };
  f.resolve = [](RunConfig& c, const std::function<std::string(const std::string&, PathKind)>& r) {
    c.sample_prompts_file = r(c.sample_prompts_file, PathKind::Input);
  };
  return f;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = [] {
    using C = RunConfig;
    auto at_least = [](int64_t lo) { return [lo](int64_t v) { return v >= lo; }; };
    std::vector<Field> t;
    // model
    t.push_back(text("base_model", &C::base_model, {}, PathKind::Input));
    t.push_back(text("model_class", &C::model_class, {"auto", "causal_lm", "conditional_generation"}));
    // data
    t.push_back(datasets("datasets", &C::datasets));
    t.push_back(datasets("test_datasets", &C::test_datasets));
    t.push_back(real(
        "val_set_size", &C::val_set_size, [](double v) { return v >= 0 && v < 1; }, "a fraction in [0, 1)"));
    t.push_back(integer("sequence_len", &C::sequence_len, at_least(2), "an integer >= 2"));
    t.push_back(boolean("sample_packing", &C::sample_packing));
    t.push_back(boolean("train_on_inputs", &C::train_on_inputs));
    t.push_back(text("enable_thinking", &C::enable_thinking, {"auto", "true", "false"}));
    t.push_back(boolean("skip_bad_rows", &C::skip_bad_rows));
    t.push_back(text("truncation", &C::truncation, {"truncate", "drop"}));
    t.push_back(text("dataset_prepared_path", &C::dataset_prepared_path, {}, PathKind::Output));
    // adapter
    t.push_back(text("adapter", &C::adapter, {"lora"}));
    t.push_back(integer("lora_r", &C::lora_r, at_least(1), "an integer >= 1"));
    t.push_back(real(
        "lora_alpha", &C::lora_alpha, [](double v) { return v > 0; }, "a number > 0"));
    t.push_back(real(
        "lora_dropout", &C::lora_dropout, [](double v) { return v >= 0 && v < 1; },
        "a probability in [0, 1)"));
    t.push_back(boolean("use_rslora", &C::use_rslora));
    t.push_back(list("lora_target_groups", &C::lora_target_groups,
                     {"attn", "linear_attn", "mlp", "shared_expert", "experts", "vision"}));
    t.push_back(list("lora_target_modules", &C::lora_target_modules));
    t.push_back(list("lora_target_parameters", &C::lora_target_parameters));
    t.push_back(text("lora_model_dir", &C::lora_model_dir, {}, PathKind::Input));
    // optimisation
    t.push_back(integer("micro_batch_size", &C::micro_batch_size, at_least(1), "an integer >= 1"));
    t.push_back(integer("gradient_accumulation_steps", &C::gradient_accumulation_steps, at_least(1),
                        "an integer >= 1"));
    t.push_back(real(
        "num_epochs", &C::num_epochs, [](double v) { return v > 0; }, "a number > 0"));
    t.push_back(integer(
        "max_steps", &C::max_steps, [](int64_t v) { return v == -1 || v >= 1; },
        "an integer >= 1, or -1 for no limit"));
    t.push_back(real(
        "learning_rate", &C::learning_rate, [](double v) { return v > 0; }, "a number > 0"));
    t.push_back(text("lr_scheduler", &C::lr_scheduler, {"constant", "linear", "cosine"}));
    t.push_back(integer("warmup_steps", &C::warmup_steps, at_least(0), "an integer >= 0"));
    t.push_back(real(
        "warmup_ratio", &C::warmup_ratio, [](double v) { return v >= 0 && v < 1; }, "a fraction in [0, 1)"));
    t.push_back(text("optimizer", &C::optimizer, {"adamw_torch", "adamw", "sgd"}));
    auto beta = [](double v) { return v >= 0 && v < 1; };
    t.push_back(real("adam_beta1", &C::adam_beta1, beta, "a number in [0, 1)"));
    t.push_back(real("adam_beta2", &C::adam_beta2, beta, "a number in [0, 1)"));
    t.push_back(real(
        "adam_epsilon", &C::adam_epsilon, [](double v) { return v > 0; }, "a number > 0"));
    t.push_back(real(
        "weight_decay", &C::weight_decay, [](double v) { return v >= 0; }, "a number >= 0"));
    t.push_back(real(
        "max_grad_norm", &C::max_grad_norm, [](double) { return true; },
        "a number (<= 0 disables clipping)"));
    t.push_back(integer("seed", &C::seed, at_least(0), "an integer >= 0"));
    // engine
    t.push_back(text("backend", &C::backend, {"auto", "cpu", "cuda"}));
    t.push_back(integer("gpu", &C::gpu, at_least(0), "a GPU index >= 0"));
    t.push_back(gpu_list("gpus"));
    t.push_back(text("kernels", &C::kernels, {"auto", "portable"}));
    t.push_back(text("base_quantization", &C::base_quantization, {"none", "fp8", "nf4"}));
    t.push_back(text("weight_layout", &C::weight_layout, {"auto", "replicated", "sharded", "expert_parallel",
                                                          "expert_parallel_sharded"}));
    t.push_back(boolean("fused_loss", &C::fused_loss));
    t.push_back(text("loss_logits", &C::loss_logits, {"fp32", "bf16"}));
    t.push_back(checkpointing("gradient_checkpointing"));
    t.push_back(integer("gradient_checkpointing_layers", &C::gradient_checkpointing_layers, at_least(-1),
                        "an integer >= 0 (layers checkpointed, from the first), or -1 for all"));
    t.push_back(boolean("activation_offload", &C::activation_offload));
    t.push_back(text("nan_policy", &C::nan_policy, {"stop", "skip"}));
    // bookkeeping
    t.push_back(text("output_dir", &C::output_dir, {}, PathKind::Output, true));
    t.push_back(text("run_name", &C::run_name));
    t.push_back(integer("logging_steps", &C::logging_steps, at_least(1), "an integer >= 1"));
    t.push_back(integer("eval_steps", &C::eval_steps, at_least(0), "an integer >= 0 (0 = at the end only)"));
    t.push_back(integer("save_steps", &C::save_steps, at_least(0), "an integer >= 0 (0 = at the end only)"));
    t.push_back(integer("save_total_limit", &C::save_total_limit, at_least(0),
                        "an integer >= 0 (0 keeps every checkpoint)"));
    t.push_back(text("resume_from_checkpoint", &C::resume_from_checkpoint, {}, PathKind::Input));
    t.push_back(list("tags", &C::tags));
    t.push_back(sample_prompts_field());
    t.push_back(integer("sample_max_new_tokens", &C::sample_max_new_tokens, at_least(1), "an integer >= 1"));
    return t;
  }();
  return table;
}

std::string problem_message(const std::string& where, const Field& f, const Problem& p) {
  return where + ": " + f.key + p.subkey + ": '" + p.value + "' is not valid (expected " +
         (p.expected.empty() ? f.expected : p.expected) + ")";
}

// Checks between keys, after each key is fine on its own.
void check_combination(const RunConfig& c, const std::string& where) {
  check(!(c.warmup_steps > 0 && c.warmup_ratio > 0),
        where + ": warmup_steps (" + std::to_string(c.warmup_steps) + ") and warmup_ratio (" +
            format_real(c.warmup_ratio) + ") are both set (expected at most one of them)");
  check(c.gpu == 0 || (c.gpus.empty() && !c.gpus_all),
        where + ": gpu (" + std::to_string(c.gpu) +
            ") and gpus are both set (expected gpu for one GPU, or gpus for several)");
  check(!c.gradient_checkpointing_auto || c.gradient_checkpointing_layers == -1,
        where + ": gradient_checkpointing: auto and gradient_checkpointing_layers (" +
            std::to_string(c.gradient_checkpointing_layers) +
            ") are both set (expected gradient_checkpointing: true with the layers, or auto alone: it plans the "
            "layers itself)");
}

std::string resolve_path(const std::string& p, const std::string& base_dir, PathKind kind) {
  if (p.empty() || base_dir.empty() || base_dir == "." || kind == PathKind::None) return p;
  const fs::path path(p);
  if (path.is_absolute()) return p;
  if (kind == PathKind::Input && p == "latest") return p;  // resume_from_checkpoint: latest
  const fs::path candidate = fs::path(base_dir) / path;
  std::error_code ec;
  const bool use = kind == PathKind::Output || fs::exists(candidate, ec);
  return use ? candidate.lexically_normal().string() : p;
}

std::string line_of(const std::string& source, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.line >= 0 ? source + ":" + std::to_string(m.line + 1) : source;
}

RunConfig parse_config(const std::string& yaml, const std::string& base_dir, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    const std::string line = e.mark.line >= 0 ? ":" + std::to_string(e.mark.line + 1) : "";
    throw Error(source + line + ": not valid YAML: " + e.msg);
  }
  RunConfig cfg;
  if (root.IsNull()) return cfg;
  check(root.IsMap(), source + ": expected a mapping of run keys (key: value), got " + flow_text(root));

  const auto& table = fields();
  const std::vector<std::string>& keys = run_config_keys();
  std::set<std::string> seen;
  std::vector<const Field*> given;
  bool load_in_4bit = false;  // axolotl's spelling of base_quantization: nf4 (read, never written)
  for (const auto& kv : root) {
    const std::string where = line_of(source, kv.first);
    check(kv.first.IsScalar(), where + ": keys must be plain names, got " + flow_text(kv.first));
    const std::string key = kv.first.Scalar();
    check(seen.insert(key).second, where + ": key '" + key + "' appears twice");
    if (key == "load_in_4bit" || key == "load_in_8bit") {
      if (kv.second.IsNull()) continue;
      bool on = false;
      try {
        on = parse_bool(kv.second);
      } catch (const BadValue& b) {
        throw Error(line_of(source, kv.second) + ": " + key + ": '" + b.value + "' is not valid (expected true or false)");
      }
      if (!on) continue;
      check(key == "load_in_4bit", where + ": load_in_8bit: true asks for a bitsandbytes 8-bit base, which is not "
                                           "supported (expected base_quantization: fp8 or nf4, or load_in_4bit: true)");
      load_in_4bit = true;
      continue;
    }
    const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.key == key; });
    if (it == table.end()) {
      const std::string guess = closest(key, keys);
      throw Error(where + ": unknown key '" + key + "'" +
                  (guess.empty() ? " (valid keys: " + join(keys) + ")" : " (did you mean '" + guess + "'?)"));
    }
    if (kv.second.IsNull()) continue;  // `key:` with no value keeps the default, as in axolotl files
    try {
      it->parse(kv.second, cfg);
    } catch (const BadValue& b) {
      throw Error(problem_message(line_of(source, kv.second), *it, Problem{b.subkey, b.value, b.expected}));
    }
    if (auto p = it->check(cfg)) throw Error(problem_message(line_of(source, kv.second), *it, *p));
    given.push_back(&*it);
  }
  if (load_in_4bit) {
    check(cfg.base_quantization == "none" || cfg.base_quantization == "nf4",
          source + ": load_in_4bit: true and base_quantization: " + cfg.base_quantization +
              " disagree (expected one of them, or base_quantization: nf4)");
    cfg.base_quantization = "nf4";
  }
  check_combination(cfg, source);
  for (const Field* f : given)
    if (f->resolve)
      f->resolve(cfg, [&](const std::string& p, PathKind k) { return resolve_path(p, base_dir, k); });
  return cfg;
}

}  // namespace

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& f : fields()) k.push_back(f.key);
    return k;
  }();
  return keys;
}

RunConfig run_config_from_yaml_string(const std::string& yaml, const std::string& base_dir) {
  return parse_config(yaml, base_dir, "run.yaml");
}

RunConfig run_config_from_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(static_cast<bool>(in), "cannot read run file '" + path + "' (missing or not readable)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::error_code ec;
  fs::path abs = fs::absolute(fs::path(path), ec);
  const std::string base_dir = (ec ? fs::path(path) : abs).parent_path().string();
  return parse_config(ss.str(), base_dir.empty() ? "." : base_dir, path);
}

std::string run_config_to_yaml(const RunConfig& cfg) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& f : fields()) {
    out << YAML::Key << f.key << YAML::Value;
    f.emit(out, cfg);
  }
  out << YAML::EndMap;
  check(out.good(), "run config: cannot write YAML: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

void run_config_validate(const RunConfig& cfg) {
  const std::string where = "run config";
  for (const auto& f : fields())
    if (auto p = f.check(cfg)) throw Error(problem_message(where, f, *p));
  check_combination(cfg, where);
  check(!cfg.base_model.empty(),
        where + ": base_model is not set (expected a Hugging Face checkpoint folder)");
  check(!cfg.datasets.empty(), where + ": datasets is empty (expected at least one {path, type})");
}

std::vector<std::pair<std::string, std::string>> run_config_items(const RunConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& f : fields()) {
    YAML::Emitter e;
    e.SetMapFormat(YAML::Flow);
    e.SetSeqFormat(YAML::Flow);
    f.emit(e, cfg);
    items.emplace_back(f.key, e.c_str());
  }
  return items;
}

std::string run_config_hash(const RunConfig& cfg) {
  // FNV-1a 64: stable across platforms and builds, unlike std::hash.
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : run_config_to_yaml(cfg)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace deltatune
