#include "data/token_cache.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer.h"
#include "io/files.h"

namespace deltatune {
namespace {

// 02: examples carry their images (path and patch grid).
constexpr char kMagic[8] = {'D', 'T', 'T', 'O', 'K', 'C', '0', '2'};

void put_u64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}
void put_str(std::string* out, const std::string& s) {
  put_u64(out, s.size());
  out->append(s);
}
void put_ids(std::string* out, const std::vector<int32_t>& v) {
  put_u64(out, v.size());
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
}

struct Reader {
  const std::string& s;
  size_t pos = 0;
  bool ok = true;
  uint64_t u64() {
    if (pos + 8 > s.size()) return ok = false, 0;
    uint64_t v;
    std::memcpy(&v, s.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (!ok || n > s.size() - pos) return ok = false, std::string();
    std::string out = s.substr(pos, n);
    pos += n;
    return out;
  }
  std::vector<int32_t> ids() {
    const uint64_t n = u64();
    if (!ok || n > (s.size() - pos) / sizeof(int32_t)) return ok = false, std::vector<int32_t>();
    std::vector<int32_t> out(n);
    std::memcpy(out.data(), s.data() + pos, n * sizeof(int32_t));
    pos += n * sizeof(int32_t);
    return out;
  }
};

}  // namespace

std::string token_cache_dir(const std::string& prepared_path) {
  if (!prepared_path.empty()) return prepared_path;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/deltatune";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/deltatune";
  return ".cache/deltatune";
}

std::string token_cache_file(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / ("tokens-" + key + ".bin")).string();
}

std::optional<CachedDataset> token_cache_load(const std::string& path, const std::string& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() < sizeof kMagic + 32 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  const std::string body = bytes.substr(0, bytes.size() - 32);
  if (hash_bytes_hex(body) != bytes.substr(bytes.size() - 32)) return std::nullopt;
  Reader r{body, sizeof kMagic};
  if (r.str() != key || !r.ok) return std::nullopt;
  CachedDataset d;
  d.format = r.str();
  d.total_rows = static_cast<int64_t>(r.u64());
  d.skipped_rows = static_cast<int64_t>(r.u64());
  const uint64_t n_reasons = r.u64();
  for (uint64_t i = 0; i < n_reasons && r.ok; ++i) d.skipped_reasons.push_back(r.str());
  const uint64_t n = r.u64();
  if (!r.ok || n > body.size()) return std::nullopt;
  d.examples.resize(n);
  d.sources.resize(n);
  for (uint64_t i = 0; i < n && r.ok; ++i) {
    d.sources[i] = r.str();
    d.examples[i].input_ids = r.ids();
    d.examples[i].labels = r.ids();
    if (d.examples[i].labels.size() != d.examples[i].input_ids.size()) r.ok = false;
    const uint64_t n_images = r.u64();
    if (!r.ok || n_images > body.size()) return std::nullopt;
    for (uint64_t k = 0; k < n_images && r.ok; ++k) {
      Example::Image im;
      im.path = r.str();
      for (auto& g : im.grid) g = static_cast<int64_t>(r.u64());
      d.examples[i].images.push_back(std::move(im));
    }
  }
  if (!r.ok || r.pos != body.size()) return std::nullopt;
  return d;
}

void token_cache_store(const std::string& path, const std::string& key, const CachedDataset& d) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::string out(kMagic, sizeof kMagic);
  put_str(&out, key);
  put_str(&out, d.format);
  put_u64(&out, static_cast<uint64_t>(d.total_rows));
  put_u64(&out, static_cast<uint64_t>(d.skipped_rows));
  put_u64(&out, d.skipped_reasons.size());
  for (const auto& s : d.skipped_reasons) put_str(&out, s);
  put_u64(&out, d.examples.size());
  for (size_t i = 0; i < d.examples.size(); ++i) {
    put_str(&out, i < d.sources.size() ? d.sources[i] : std::string());
    put_ids(&out, d.examples[i].input_ids);
    put_ids(&out, d.examples[i].labels);
    put_u64(&out, d.examples[i].images.size());
    for (const Example::Image& im : d.examples[i].images) {
      put_str(&out, im.path);
      for (int64_t g : im.grid) put_u64(&out, static_cast<uint64_t>(g));
    }
  }
  out += hash_bytes_hex(out);
  AtomicFileWriter w(path);
  w.write(out.data(), out.size());
  w.commit();
}

}  // namespace deltatune
