#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/hf_unicode_overrides.h"
#include "data/regex_class_overrides.h"
#include "core/utf8.h"

namespace deltatune {

using nlohmann::json;

// ------------------------------------------------------------------------------------------------
// Hashing (cache keys): two independent 64-bit multiply-xorshift lanes over 8-byte words.

namespace {

struct Hasher128 {
  uint64_t a = 0x9E3779B97F4A7C15ull, b = 0xC2B2AE3D27D4EB4Full;
  uint64_t total = 0;
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }
  void update(const char* p, size_t n) {
    // Callers feed arbitrary chunk sizes; words are taken from each chunk plus a tail, so the hash
    // depends on chunking. hash_file_hex always uses the same chunk size, so keys are stable.
    total += n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      a = mix(a ^ w) + 0x632BE59BD9B4E019ull;
      b = mix(b + w * 0x9E3779B97F4A7C15ull) ^ (a >> 7);
    }
    uint64_t w = 0;
    if (n > i) std::memcpy(&w, p + i, n - i);  // p may be null when n == 0 (an empty string_view)
    a = mix(a ^ w ^ (uint64_t(n - i) << 56));
    b = mix(b + w + 0x85EBCA77C2B2AE63ull);
  }
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)mix(a ^ total),
                  (unsigned long long)mix(b + total));
    return buf;
  }
};

}  // namespace

std::string hash_bytes_hex(std::string_view bytes) {
  Hasher128 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string hash_file_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path + ": cannot open file for hashing");
  Hasher128 h;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(f.gcount());
    if (n) h.update(buf.data(), n);
  }
  return h.hex();
}

// ------------------------------------------------------------------------------------------------

namespace {

// GPT-2 byte <-> printable-codepoint table used by ByteLevel.
struct ByteTable {
  static constexpr uint32_t kMaxCp = 256 + 68;  // printable bytes map to themselves, the other 68 to 256..323
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, kMaxCp> cp_to_byte{};  // -1: not a byte-level character
  ByteTable() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// Byte-level token string (e.g. "Ġhello") -> raw bytes; false if a char is outside the table.
bool byte_level_to_bytes(std::string_view s, std::string* out) {
  out->clear();
  const auto& t = byte_table();
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int n = utf8_decode(s, i, &cp);
    if (n <= 0) return false;
    if (cp >= ByteTable::kMaxCp || t.cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(t.cp_to_byte[cp]));
    i += static_cast<size_t>(n);
  }
  return true;
}

enum class NormKind { kNFC, kNFD, kNFKC, kNFKD };

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreStep {
  enum Kind { kSplit, kByteLevel } kind;
  // Split
  pcre2_code* re = nullptr;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  // ByteLevel
  bool add_prefix_space = false;
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

struct Piece {
  std::string_view text;  // bytes of this piece (into an owned buffer)
  int64_t offset;         // byte offset in the original text
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

pcre2_code* compile_regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &erroff, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(where + ": cannot compile pre-tokenizer regex at offset " + std::to_string(erroff) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return re;
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string utf8proc_normalize(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw Error(std::string("tokenizer: text is not valid UTF-8 (") + utf8proc_errmsg(n) + ")");
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

template <typename Range>
const Range* find_range(const Range* begin, const Range* end, uint32_t cp) {
  const Range* hit = std::lower_bound(begin, end, cp, [](const Range& r, uint32_t c) { return r.last < c; });
  return hit != end && hit->first <= cp ? hit : nullptr;
}

bool is_normalizer_inert(uint32_t cp) {
  return cp >= kNormalizerInert[0].first &&
         find_range(std::begin(kNormalizerInert), std::end(kNormalizerInert), cp) != nullptr;
}
static_assert(kNormalizerInert[0].first >= 0x80, "hf_normalize skips ASCII");

// HF's normalizers carry older Unicode tables than utf8proc, and utf8proc < 2.9 drops a U+11A7 after a Hangul
// LV syllable: the code points of kNormalizerInert (hf_unicode_overrides.h) are unassigned starters to HF (no
// decomposition, class 0, no composition). Normalizing the text in pieces around them and copying them as
// they are gives HF's result: a starter that composes with nothing ends every reordering and composition run.
std::string hf_normalize(std::string_view text, int options) {
  std::string r;
  size_t from = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_decode(text, i, &cp);
    if (n <= 0) {
      ++i;
      continue;
    }
    if (n > 1 && is_normalizer_inert(cp)) {
      if (i > from) r += utf8proc_normalize(text.substr(from, i - from), options);
      r.append(text.substr(i, static_cast<size_t>(n)));
      from = i + static_cast<size_t>(n);
    }
    i += static_cast<size_t>(n);
  }
  if (from == 0) return utf8proc_normalize(text, options);
  if (from < text.size()) r += utf8proc_normalize(text.substr(from), options);
  return r;
}

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex \w, which HF's single_word added tokens test their neighbours with: Alphabetic, marks, decimal
// digits, connector punctuation, ZWNJ/ZWJ. Categories L, M, Nd, Nl, Pc give it but for kWordCharOverrides.
bool is_word_char(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  if (const auto* o = find_range(std::begin(kWordCharOverrides), std::end(kWordCharOverrides), c))
    return o->word;
  if (c == 0x200C || c == 0x200D) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_ME) || cat == UTF8PROC_CATEGORY_ND ||
         cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_PC;
}

constexpr size_t kCacheLimit = 1 << 16;
constexpr size_t kCacheMaxWordBytes = 128;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

// Per-thread BPE results of the tokenizer used last on this thread. Per-thread rather than shared
// under locks: the hottest words would otherwise serialize every thread on the same mutex.
struct ThreadBpeCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

ThreadBpeCache& thread_bpe_cache() {
  thread_local ThreadBpeCache cache;
  return cache;
}

uint64_t next_tokenizer_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::string hash;
  // normalizer
  std::vector<NormKind> norms;
  // pre-tokenizer steps in order
  std::vector<PreStep> pre;
  // model
  std::unordered_map<std::string, int32_t> vocab;  // raw bytes -> id
  std::vector<std::string> id_bytes;               // id -> raw bytes (BPE tokens); content for added
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a,b) -> (rank, merged id)
  bool ignore_merges = false;
  bool byte_level_decoder = true;
  // added tokens
  std::vector<AddedToken> added;
  std::vector<uint8_t> added_flag;  // per id: 0 none, 1 added, 2 special
  std::vector<std::vector<int>> raw_first_byte,
      norm_first_byte;  // byte -> indices into `added`, longest first
  bool has_norm_added = false;
  std::unordered_map<std::string, int32_t> added_by_content;
  // Identifies this tokenizer's entries in the per-thread BPE caches.
  const uint64_t id = next_tokenizer_id();

  ~Impl() {
    for (auto& p : pre)
      if (p.re) pcre2_code_free(p.re);
  }

  void load(const json& j);
  void load_normalizer(const json& n);
  void load_pre_tokenizer(const json& p);
  void load_model(const json& m);
  void load_added(const json& a);

  std::string normalize(std::string_view s) const;
  std::vector<int64_t> normalized_offsets(std::string_view seg, const std::string& norm) const;
  void pre_tokenize(std::string_view text, int64_t base, bool exact_offsets, std::vector<Piece>* out,
                    std::string* arena_hint) const;
  void bpe_word(std::string_view word, std::vector<int32_t>* out) const;
  void bpe_word_uncached(std::string_view word, std::vector<int32_t>* out) const;
  void encode_impl(std::string_view text, std::vector<int32_t>* ids, std::vector<int64_t>* starts,
                   std::vector<int64_t>* ends) const;
  void encode_plain(std::string_view seg, int64_t offset, std::vector<int32_t>* ids,
                    std::vector<int64_t>* starts, std::vector<int64_t>* ends) const;
  void split_added(std::string_view text, const std::vector<std::vector<int>>& table,
                   std::vector<std::pair<int32_t, std::pair<size_t, size_t>>>* out) const;
};

void Tokenizer::Impl::load(const json& j) {
  check(j.is_object(), source + ": not a JSON object");
  if (j.contains("normalizer")) load_normalizer(j["normalizer"]);
  if (j.contains("pre_tokenizer")) load_pre_tokenizer(j["pre_tokenizer"]);
  check(j.contains("model"), source + ": missing \"model\"");
  load_model(j["model"]);
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    const auto& d = j["decoder"];
    const std::string type = d.value("type", "");
    check(type == "ByteLevel",
          source + ": decoder type \"" + type + "\" is not supported (expected ByteLevel)");
  }
  if (j.contains("added_tokens")) load_added(j["added_tokens"]);
}

void Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : n.at("normalizers")) load_normalizer(s);
  } else if (type == "NFC") {
    norms.push_back(NormKind::kNFC);
  } else if (type == "NFD") {
    norms.push_back(NormKind::kNFD);
  } else if (type == "NFKC") {
    norms.push_back(NormKind::kNFKC);
  } else if (type == "NFKD") {
    norms.push_back(NormKind::kNFKD);
  } else {
    throw Error(source + ": normalizer type \"" + type +
                "\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& p) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : p.at("pretokenizers")) load_pre_tokenizer(s);
  } else if (type == "Split") {
    check(!p.value("invert", false), source + ": Split pre-tokenizer with invert=true is not supported");
    PreStep step{PreStep::kSplit};
    const auto& pat = p.at("pattern");
    std::string pattern;
    if (pat.contains("Regex"))
      pattern = pat["Regex"].get<std::string>();
    else if (pat.contains("String"))
      pattern = escape_regex(pat["String"].get<std::string>());
    else
      throw Error(source + ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const std::string behavior = p.value("behavior", "Isolated");
    if (behavior == "Isolated")
      step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "Removed")
      step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "MergedWithPrevious")
      step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext")
      step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous")
      step.behavior = SplitBehavior::kContiguous;
    else
      throw Error(source + ": Split behavior \"" + behavior + "\" is not supported");
    step.re = compile_regex(pattern, source);
    pre.push_back(step);
  } else if (type == "ByteLevel") {
    // ByteLevel's byte mapping happens in the model step (we keep raw bytes throughout); its optional
    // GPT-2 regex split and prefix space are pre-tokenization.
    PreStep step{PreStep::kByteLevel};
    step.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) step.re = compile_regex(kGpt2Pattern, source);
    pre.push_back(step);
  } else {
    throw Error(source + ": pre_tokenizer type \"" + type +
                "\" is not supported (Split, ByteLevel, Sequence)");
  }
}

void Tokenizer::Impl::load_model(const json& m) {
  const std::string type = m.value("type", "BPE");
  check(type == "BPE", source + ": model type \"" + type + "\" is not supported (expected BPE)");
  check(!m.contains("dropout") || m["dropout"].is_null() || m["dropout"].get<double>() == 0.0,
        source + ": BPE dropout is not supported");
  check(!m.value("byte_fallback", false), source + ": BPE byte_fallback is not supported");
  check(m.value("continuing_subword_prefix", json("")).is_null() ||
            m.value("continuing_subword_prefix", json("")) == "",
        source + ": continuing_subword_prefix is not supported");
  check(m.value("end_of_word_suffix", json("")).is_null() || m.value("end_of_word_suffix", json("")) == "",
        source + ": end_of_word_suffix is not supported");
  ignore_merges = m.value("ignore_merges", false);
  const auto& v = m.at("vocab");
  check(v.is_object(), source + ": model.vocab must be an object");
  vocab.reserve(v.size() * 2);
  std::string bytes;
  int32_t max_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    check(byte_level_to_bytes(it.key(), &bytes),
          source + ": vocab entry \"" + it.key() + "\" is not a byte-level token");
    vocab.emplace(bytes, id);
    max_id = std::max(max_id, id);
  }
  id_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [b, id] : vocab) id_bytes[static_cast<size_t>(id)] = b;
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(std::string(1, static_cast<char>(b)));
    byte_id[static_cast<size_t>(b)] = it == vocab.end() ? -1 : it->second;
  }
  const auto& ms = m.at("merges");
  merges.reserve(ms.size() * 2);
  std::string left, right;
  int32_t rank = 0;
  for (const auto& e : ms) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const auto sp = s.find(' ');
      check(sp != std::string::npos, source + ": merge \"" + s + "\" is not \"a b\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      check(e.is_array() && e.size() == 2, source + ": merges must be strings \"a b\" or pairs [a, b]");
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    check(byte_level_to_bytes(a, &left) && byte_level_to_bytes(b, &right),
          source + ": merge entry is not byte-level: " + a + " " + b);
    auto ia = vocab.find(left), ib = vocab.find(right), im = vocab.find(left + right);
    check(ia != vocab.end() && ib != vocab.end() && im != vocab.end(),
          source + ": merge " + a + " " + b + " refers to tokens missing from the vocab");
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    merges.emplace(key, std::make_pair(rank, im->second));  // first (lowest-rank) occurrence wins
    ++rank;
  }
}

void Tokenizer::Impl::load_added(const json& a) {
  for (const auto& t : a) {
    AddedToken tok{t.at("id").get<int32_t>(),     t.at("content").get<std::string>(),
                   t.value("single_word", false), t.value("lstrip", false),
                   t.value("rstrip", false),      t.value("normalized", false),
                   t.value("special", false)};
    check(!tok.content.empty(), source + ": added token " + std::to_string(tok.id) + " has empty content");
    added.push_back(tok);
  }
  int32_t max_id = static_cast<int32_t>(id_bytes.size()) - 1;
  for (const auto& t : added) max_id = std::max(max_id, t.id);
  id_bytes.resize(static_cast<size_t>(max_id + 1));
  added_flag.assign(static_cast<size_t>(max_id + 1), 0);
  raw_first_byte.assign(256, {});
  norm_first_byte.assign(256, {});
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& t = added[i];
    id_bytes[static_cast<size_t>(t.id)] = t.content;
    added_flag[static_cast<size_t>(t.id)] = t.special ? 2 : 1;
    added_by_content[t.content] = t.id;
    // HF matches special tokens and non-normalized tokens on the raw text, normalized ones after NFC.
    const bool on_raw = t.special || !t.normalized;
    auto& table = on_raw ? raw_first_byte : norm_first_byte;
    if (!on_raw) has_norm_added = true;
    table[static_cast<uint8_t>(t.content[0])].push_back(static_cast<int>(i));
  }
  for (auto* table : {&raw_first_byte, &norm_first_byte})
    for (auto& v : *table)
      std::stable_sort(v.begin(), v.end(),
                       [&](int x, int y) { return added[x].content.size() > added[y].content.size(); });
}

std::string Tokenizer::Impl::normalize(std::string_view s) const {
  std::string cur(s);
  for (NormKind k : norms) {
    bool ascii = true;
    for (unsigned char c : cur)
      if (c >= 0x80) {
        ascii = false;
        break;
      }
    if (ascii) continue;  // every Unicode normal form leaves ASCII unchanged
    int options = UTF8PROC_STABLE;
    switch (k) {
      case NormKind::kNFC:
        options |= UTF8PROC_COMPOSE;
        break;
      case NormKind::kNFD:
        options |= UTF8PROC_DECOMPOSE;
        break;
      case NormKind::kNFKC:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case NormKind::kNFKD:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    cur = hf_normalize(cur, options);
  }
  return cur;
}

// Leftmost-longest, non-overlapping matches of added tokens, with HF's single_word/lstrip/rstrip rules.
// Output: (id or -1 for plain text, [begin, end) byte range) covering `text`.
void Tokenizer::Impl::split_added(std::string_view text, const std::vector<std::vector<int>>& table,
                                  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>>* out) const {
  out->clear();
  size_t start_offset = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto& cands = table[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (int c : cands) {
      const auto& content = added[static_cast<size_t>(c)].content;
      if (text.compare(i, content.size(), content) == 0) {
        hit = &added[static_cast<size_t>(c)];
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->content.size();
    if (hit->single_word) {
      uint32_t before = 0, after = 0;
      const bool start_ok = start == 0 || !is_word_char((utf8_decode_before(text, start, &before), before));
      const bool stop_ok = stop == n || (utf8_decode(text, stop, &after) > 0 && !is_word_char(after));
      if (!start_ok || !stop_ok) {
        ++i;
        continue;
      }
    }
    if (hit->lstrip) {
      size_t s = start;
      uint32_t cp;
      while (s > start_offset) {
        const int len = utf8_decode_before(text, s, &cp);
        if (len <= 0 || !is_unicode_whitespace(cp)) break;
        s -= static_cast<size_t>(len);
      }
      start = std::max(s, start_offset);
    }
    if (hit->rstrip) {
      uint32_t cp;
      while (stop < n) {
        const int len = utf8_decode(text, stop, &cp);
        if (len <= 0 || !is_unicode_whitespace(cp)) break;
        stop += static_cast<size_t>(len);
      }
    }
    if (start > start_offset) out->push_back({-1, {start_offset, start}});
    out->push_back({hit->id, {start, stop}});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < n) out->push_back({-1, {start_offset, n}});
}

namespace {

// Per-thread PCRE2 scratch: match data plus a JIT stack larger than the 32 KiB default, so long
// whitespace runs cannot exhaust it.
struct MatchScratch {
  pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  MatchScratch() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
  ~MatchScratch() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

// A code point of class cls ('L', 'N', 'M' or 'O': none of them) in PCRE2's tables, `bytes` long in UTF-8.
uint32_t regex_stand_in(char cls, int bytes) {
  constexpr uint32_t kL[3] = {0xE0, 0x4E00, 0x20000}, kN[3] = {0xB2, 0x2460, 0x1D7CE},
                     kM[3] = {0x300, 0x20D0, 0x1D167}, kO[3] = {0xA9, 0x2600, 0x1F600};
  const uint32_t* t = cls == 'L' ? kL : cls == 'N' ? kN : cls == 'M' ? kM : kO;
  return t[bytes - 2];
}

// PCRE2's Unicode tables are older than those of HF's Oniguruma (regex_class_overrides.h). For matching only,
// each code point whose class differs becomes a stand-in of Oniguruma's class with the same UTF-8 length, so
// the matches' byte offsets hold for the original text. Empty when nothing in s differs.
std::string regex_subject_stand_ins(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const int n = static_cast<unsigned char>(s[i]) < 0xE0 ? -1 : utf8_decode(s, i, &cp);  // all ≥ U+0800
    if (n < 0) {
      ++i;
      continue;
    }
    const auto* hit = std::lower_bound(std::begin(kRegexClassOverrides), std::end(kRegexClassOverrides), cp,
                                       [](const RegexClassOverride& r, uint32_t c) { return r.last < c; });
    if (hit != std::end(kRegexClassOverrides) && hit->first <= cp) {
      if (out.empty()) out.assign(s);
      std::string bytes;
      utf8_append(&bytes, regex_stand_in(hit->cls, n));
      out.replace(i, static_cast<size_t>(n), bytes);
    }
    i += static_cast<size_t>(n);
  }
  return out;
}
static_assert(kRegexClassOverrides[0].first >= 0x800,
              "regex_subject_stand_ins skips code points below U+0800");

// Applies one regex split to a piece, appending resulting sub-pieces.
void regex_split(const PreStep& step, const Piece& piece, std::vector<Piece>* out) {
  MatchScratch& scratch = match_scratch();
  pcre2_match_data* md = scratch.md;
  const std::string stand_ins = regex_subject_stand_ins(piece.text);
  const auto* subject =
      reinterpret_cast<PCRE2_SPTR>(stand_ins.empty() ? piece.text.data() : stand_ins.data());
  const size_t len = piece.text.size();
  // (begin, end, is_match)
  std::vector<std::tuple<size_t, size_t, bool>> parts;
  size_t pos = 0, last = 0;
  while (pos <= len) {
    const int rc = pcre2_match(step.re, subject, len, pos, PCRE2_NO_UTF_CHECK, md, scratch.ctx);
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMATCH) break;
      throw Error("tokenizer: regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: skip one UTF-8 character
      if (b >= len) break;
      pos = b + 1;
      while (pos < len && (static_cast<unsigned char>(piece.text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > last) parts.emplace_back(last, b, false);
    parts.emplace_back(b, e, true);
    last = pos = e;
  }
  if (last < len) parts.emplace_back(last, len, false);
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out->push_back({piece.text.substr(b, e - b), piece.offset + static_cast<int64_t>(b)});
  };
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (auto& [b, e, m] : parts) emit(b, e);
      break;
    case SplitBehavior::kRemoved:
      for (auto& [b, e, m] : parts)
        if (!m) emit(b, e);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      size_t cur_b = 0;
      bool open = false;
      for (auto& [b, e, m] : parts) {
        if (!open) cur_b = b, open = true;
        if (m) emit(cur_b, e), open = false;
      }
      if (open) emit(cur_b, len);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      size_t cur_b = 0;
      bool open = false;
      for (auto& [b, e, m] : parts) {
        if (m) {
          if (open) emit(cur_b, b);
          cur_b = b, open = true;
        } else if (!open) {
          cur_b = b, open = true;
        }
      }
      if (open) emit(cur_b, len);
      break;
    }
    case SplitBehavior::kContiguous: {
      size_t cur_b = 0;
      bool open = false, open_is_match = false;
      for (auto& [b, e, m] : parts) {
        if (open && m && open_is_match) continue;
        if (open) emit(cur_b, b);
        cur_b = b, open = true, open_is_match = m;
      }
      if (open) emit(cur_b, len);
      break;
    }
  }
}

}  // namespace

void Tokenizer::Impl::bpe_word_uncached(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (unsigned char c : word) {
    const int32_t id = byte_id[c];
    if (id < 0) continue;  // no unk token: HF drops what the vocab cannot represent
    const auto k = static_cast<int32_t>(syms.size());
    syms.push_back({id, k - 1, k + 1, 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Cand {
    int32_t rank, pos, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap_store;
  heap_store.reserve(syms.size());
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap(std::greater<Cand>(),
                                                                        std::move(heap_store));
  auto push_pair = [&](int32_t pos) {
    const int32_t nx = syms[static_cast<size_t>(pos)].next;
    if (pos < 0 || nx < 0) return;
    const uint64_t key = (uint64_t(uint32_t(syms[static_cast<size_t>(pos)].id)) << 32) |
                         uint32_t(syms[static_cast<size_t>(nx)].id);
    auto it = merges.find(key);
    if (it != merges.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = syms[static_cast<size_t>(c.pos)];
    if (s.len == 0 || s.next < 0) continue;  // removed or at the end now
    Sym& nx = syms[static_cast<size_t>(s.next)];
    const uint64_t key = (uint64_t(uint32_t(s.id)) << 32) | uint32_t(nx.id);
    auto it = merges.find(key);
    if (it == merges.end() || it->second.first != c.rank) continue;  // stale entry
    s.id = c.merged;
    s.len += nx.len;
    nx.len = 0;
    s.next = nx.next;
    if (s.next >= 0) syms[static_cast<size_t>(s.next)].prev = c.pos;
    if (s.prev >= 0) push_pair(s.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next)
    out->push_back(syms[static_cast<size_t>(i)].id);
}

void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() > kCacheMaxWordBytes) {
    bpe_word_uncached(word, out);
    return;
  }
  ThreadBpeCache& cache = thread_bpe_cache();
  if (cache.owner != id) {
    cache.map.clear();
    cache.owner = id;
  }
  auto it = cache.map.find(word);
  if (it != cache.map.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  bpe_word_uncached(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cache.map.size() >= kCacheLimit) cache.map.clear();
  cache.map.emplace(std::string(word), std::move(ids));
}

// For each byte position of norm = normalize(seg) (and its end), the position in seg. seg is normalized again
// in pieces that each start at a starter (canonical combining class 0); a piece the normalizer leaves alone
// maps byte for byte, a changed one (e.g. "e" + U+0301 -> "é") maps as a whole to its start. Empty when the
// pieces' normalizations do not add up to norm (a starter that composes with the one before it, e.g.
// decomposed Hangul jamo): offsets then stay approximate.
std::vector<int64_t> Tokenizer::Impl::normalized_offsets(std::string_view seg,
                                                         const std::string& norm) const {
  std::vector<int64_t> map;
  map.reserve(norm.size() + 1);
  size_t start = 0, joined = 0;
  bool adds_up = true;
  auto flush = [&](size_t end) {
    const std::string_view piece = seg.substr(start, end - start);
    const std::string n = normalize(piece);
    adds_up = adds_up && norm.compare(joined, n.size(), n) == 0;
    for (size_t i = 0; i < n.size(); ++i) map.push_back(static_cast<int64_t>(n == piece ? start + i : start));
    joined += n.size();
    start = end;
  };
  for (size_t i = 0; i < seg.size() && adds_up;) {
    uint32_t cp = 0;
    const int len = utf8_decode(seg, i, &cp);
    if (i > start && len > 0 &&
        utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class == 0)
      flush(i);
    i += static_cast<size_t>(len > 0 ? len : 1);
  }
  if (adds_up) flush(seg.size());
  if (!adds_up || joined != norm.size()) return {};
  map.push_back(static_cast<int64_t>(seg.size()));
  return map;
}

// A stretch of text with no added tokens: normalize, pre-tokenize, BPE each piece.
void Tokenizer::Impl::encode_plain(std::string_view seg, int64_t offset, std::vector<int32_t>* ids,
                                   std::vector<int64_t>* starts, std::vector<int64_t>* ends) const {
  if (seg.empty()) return;
  const std::string norm = normalize(seg);
  const bool exact = norm.size() == seg.size() && std::string_view(norm) == seg;
  const std::vector<int64_t> to_seg =
      starts && !exact ? normalized_offsets(seg, norm) : std::vector<int64_t>{};
  std::vector<Piece> pieces{{std::string_view(norm), 0}}, next;
  std::deque<std::string> owned;  // pieces with a prefix space (stable addresses)
  for (const auto& step : pre) {
    if (step.kind == PreStep::kByteLevel && step.add_prefix_space) {
      for (auto& p : pieces) {
        if (!p.text.empty() && p.text[0] != ' ') {
          owned.push_back(" " + std::string(p.text));
          p.text = owned.back();
          p.offset -= 1;  // the added space belongs to no input byte; offsets are clamped below
        }
      }
    }
    if (!step.re) continue;
    next.clear();
    for (const auto& p : pieces) regex_split(step, p, &next);
    pieces.swap(next);
  }
  for (const auto& p : pieces) {
    const size_t before = ids->size();
    bpe_word(p.text, ids);
    if (starts) {
      int64_t pos = p.offset;
      for (size_t t = before; t < ids->size(); ++t) {
        const int64_t len = static_cast<int64_t>(id_bytes[static_cast<size_t>((*ids)[t])].size());
        int64_t b = std::max<int64_t>(pos, 0), e = std::max<int64_t>(pos + len, 0);
        if (!to_seg.empty()) {  // positions in the normalized text -> in the segment
          const auto last = static_cast<int64_t>(norm.size());
          b = to_seg[static_cast<size_t>(std::min(b, last))];
          e = to_seg[static_cast<size_t>(std::min(e, last))];
        } else if (!exact) {  // no exact map: clamp into the segment
          b = std::min<int64_t>(b, static_cast<int64_t>(seg.size()));
          e = std::min<int64_t>(e, static_cast<int64_t>(seg.size()));
        }
        starts->push_back(offset + b);
        ends->push_back(offset + e);
        pos += len;
      }
    }
  }
}

void Tokenizer::Impl::encode_impl(std::string_view text, std::vector<int32_t>* ids,
                                  std::vector<int64_t>* starts, std::vector<int64_t>* ends) const {
  // PCRE2 runs with PCRE2_NO_UTF_CHECK, so invalid input must be refused here.
  const size_t bad = utf8_find_invalid(text);
  if (bad != std::string_view::npos)
    throw Error("tokenizer: text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> parts, inner;
  split_added(text, raw_first_byte, &parts);
  for (const auto& [id, range] : parts) {
    const auto [b, e] = range;
    if (id >= 0) {
      ids->push_back(id);
      if (starts) starts->push_back(static_cast<int64_t>(b)), ends->push_back(static_cast<int64_t>(e));
      continue;
    }
    const std::string_view seg = text.substr(b, e - b);
    if (!has_norm_added) {
      encode_plain(seg, static_cast<int64_t>(b), ids, starts, ends);
      continue;
    }
    // Normalized added tokens are found in the normalized text; its positions map back through
    // normalized_offsets (approximately where that has no map).
    const std::string norm = normalize(seg);
    const std::vector<int64_t> to_seg =
        starts && norm != seg ? normalized_offsets(seg, norm) : std::vector<int64_t>{};
    auto seg_pos = [&](int64_t at) {
      at = std::clamp<int64_t>(at, 0, static_cast<int64_t>(norm.size()));
      return static_cast<int64_t>(b) + (to_seg.empty()
                                            ? std::min<int64_t>(at, static_cast<int64_t>(seg.size()))
                                            : to_seg[static_cast<size_t>(at)]);
    };
    split_added(norm, norm_first_byte, &inner);
    for (const auto& [id2, r2] : inner) {
      const size_t first = starts ? starts->size() : 0;
      if (id2 >= 0) {
        ids->push_back(id2);
        if (starts)
          starts->push_back(static_cast<int64_t>(r2.first)), ends->push_back(static_cast<int64_t>(r2.second));
      } else {  // offsets in the normalized text first, mapped below
        encode_plain(std::string_view(norm).substr(r2.first, r2.second - r2.first),
                     static_cast<int64_t>(r2.first), ids, starts, ends);
      }
      if (starts)
        for (size_t k = first; k < starts->size(); ++k)
          (*starts)[k] = seg_pos((*starts)[k]), (*ends)[k] = seg_pos((*ends)[k]);
    }
  }
}

// ------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json_string(const std::string& text, const std::string& source_name) {
  auto impl = std::make_unique<Impl>();
  impl->source = source_name;
  impl->hash = hash_bytes_hex(text);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source_name + ": invalid JSON: " + e.what());
  }
  try {
    impl->load(j);
  } catch (const json::exception& e) {
    throw Error(source_name + ": unexpected structure: " + e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::string file = path;
  {
    std::ifstream probe(path + "/tokenizer.json", std::ios::binary);
    if (probe.good()) file = path + "/tokenizer.json";
  }
  std::ifstream f(file, std::ios::binary);
  check(f.good(), file + ": cannot open tokenizer (expected a tokenizer.json file or a folder holding one)");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_string(ss.str(), file);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_impl(text, &ids, nullptr, nullptr);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_offsets(std::string_view text, std::vector<int64_t>* starts,
                                                    std::vector<int64_t>* ends) const {
  std::vector<int32_t> ids;
  std::vector<int64_t> s, e;
  impl_->encode_impl(text, &ids, &s, &e);
  // Where normalization changed the text, offsets are approximate: keep them inside the text and ordered.
  const auto n = static_cast<int64_t>(text.size());
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = std::clamp<int64_t>(s[i], i ? s[i - 1] : 0, n);
    e[i] = std::clamp<int64_t>(e[i], s[i], n);
  }
  if (starts) *starts = std::move(s);
  if (ends) *ends = std::move(e);
  return ids;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  check(id >= 0 && static_cast<size_t>(id) < impl_->id_bytes.size(),
        "token id " + std::to_string(id) + " is out of range");
  return impl_->id_bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) continue;  // HF skips unknown ids
    if (skip_special_tokens && is_special(id)) continue;
    if (is_added(id)) {
      // HF runs added tokens through the ByteLevel decoder too: a token made only of byte-table
      // characters is mapped back to those bytes (so "é" becomes the lone byte 0xE9), else kept as is.
      const std::string& content = impl_->id_bytes[static_cast<size_t>(id)];
      std::string mapped;
      bytes += byte_level_to_bytes(content, &mapped) ? mapped : content;
      continue;
    }
    bytes += impl_->id_bytes[static_cast<size_t>(id)];
  }
  return utf8_make_valid(bytes);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto a = impl_->added_by_content.find(std::string(token));
  if (a != impl_->added_by_content.end()) return a->second;
  auto it = impl_->vocab.find(std::string(token));
  if (it != impl_->vocab.end()) return it->second;
  std::string bytes;
  if (byte_level_to_bytes(token, &bytes)) {
    it = impl_->vocab.find(bytes);
    if (it != impl_->vocab.end()) return it->second;
  }
  return -1;
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_bytes.size());
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->added_flag.size() &&
         impl_->added_flag[static_cast<size_t>(id)] == 2;
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->added_flag.size() &&
         impl_->added_flag[static_cast<size_t>(id)] != 0;
}

const std::string& Tokenizer::content_hash() const {
  return impl_->hash;
}

}  // namespace deltatune
