// On-disk cache of one dataset file's tokenized examples, so a second run skips tokenization.
// The file name carries the key (hash of data file content, tokenizer.json, chat template and the
// settings that change tokens); the file repeats the key and ends with a checksum, so a stale or
// corrupt file is ignored (and rebuilt). Written atomically (temp file + rename).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/batch.h"

namespace deltatune {

struct CachedDataset {
  std::string format;
  int64_t total_rows = 0, skipped_rows = 0;
  std::vector<std::string> skipped_reasons;
  std::vector<std::string> sources;  // "file:line" per example
  std::vector<Example> examples;     // before truncation
};

// Folder for cache files: `prepared_path` if set, else $XDG_CACHE_HOME/deltatune, else ~/.cache/deltatune.
std::string token_cache_dir(const std::string& prepared_path);
std::string token_cache_file(const std::string& dir, const std::string& key);
std::optional<CachedDataset> token_cache_load(const std::string& path, const std::string& key);
void token_cache_store(const std::string& path, const std::string& key, const CachedDataset& data);

}  // namespace deltatune
