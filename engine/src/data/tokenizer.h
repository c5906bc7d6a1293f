// Byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json`, giving the same ids as the
// `tokenizers` library for the structures Qwen-family (and GPT-2/Llama-3-style) checkpoints use:
// normalizer NFC/NFKC/NFD/NFKD (or a Sequence of them), pre-tokenizer Split(regex)/ByteLevel (or a
// Sequence), BPE model with merges, added tokens matched before everything else, ByteLevel decoder.
// Anything else in the file is an Error naming the unsupported part.
// The regexes run on PCRE2 (10.42: Unicode 14 tables) while HF's Oniguruma knows a newer Unicode: code points
// whose \p{L} / \p{N} / \p{M} class differs (CJK Ext. H/I, Kawi, Kaktovik numerals, ...; measured against
// `tokenizers` by scripts/gen_regex_class_overrides.py) are matched as a stand-in of Oniguruma's class.
// Likewise utf8proc (Unicode 15) knows code points that HF's normalizers treat as unassigned, and HF's
// single_word test is Rust regex \w: both measured by scripts/gen_hf_unicode_overrides.py.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deltatune {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a folder that holds one.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json_string(const std::string& json,
                                    const std::string& source_name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text` exactly as HF `tokenizer(text, add_special_tokens=False)`: added tokens (special or not)
  // found in the text become their ids. Thread-safe (BPE results are cached per thread).
  std::vector<int32_t> encode(std::string_view text) const;
  // Same, plus for each token the byte offset in `text` where it starts (end = next start or the span
  // given by offsets_end). Offsets inside a stretch that the normalizer changed point at the start of
  // that stretch's word, which is exact whenever NFC leaves the text alone.
  std::vector<int32_t> encode_with_offsets(std::string_view text, std::vector<int64_t>* starts,
                                           std::vector<int64_t>* ends) const;

  // Bytes of the ids (invalid UTF-8 from partial byte tokens replaced by U+FFFD, as HF does).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // The raw text a single id stands for (bytes for BPE tokens; may be a partial UTF-8 sequence).
  std::string token_bytes(int32_t id) const;

  int32_t token_to_id(std::string_view token) const;  // added-token content or vocab entry; -1 if none
  int64_t vocab_size() const;                         // highest id + 1
  bool is_special(int32_t id) const;                  // added token with special: true
  bool is_added(int32_t id) const;
  // 128-bit content hash of the tokenizer.json (hex), for cache keys.
  const std::string& content_hash() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Fast non-cryptographic 128-bit hash (hex string) of bytes; used for cache keys.
std::string hash_bytes_hex(std::string_view bytes);
// Hash of a file's content, read in chunks; throws Error if unreadable.
std::string hash_file_hex(const std::string& path);

}  // namespace deltatune
