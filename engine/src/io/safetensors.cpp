// safetensors reader/writer. The reader validates the same invariants as the reference implementation
// (huggingface/safetensors `Metadata::validate`) so a file we accept is one HF accepts, and every error
// names the file and, where there is one, the tensor.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/files.h"

namespace deltatune {

namespace {

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // safetensors MAX_HEADER_SIZE

std::string errno_str(int err) {
  return std::strerror(err);
}

// Unmaps on destruction; the shared_ptr<void> handed to tensors keeps it alive.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) munmap(addr, size);
  }
};

std::string json_snippet(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool read_u64_array(const nlohmann::json& j, std::vector<uint64_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const auto& v : j) {
    if (!v.is_number_unsigned()) return false;
    out->push_back(v.get<uint64_t>());
  }
  return true;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, path + ": cannot open safetensors file (" + errno_str(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw Error(path + ": file is " + std::to_string(file_size) +
                " bytes, shorter than the 8-byte safetensors header length (truncated?)");
  }
  void* addr = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  check(addr != MAP_FAILED, path + ": mmap failed (" + errno_str(map_err) + ")");
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = file_size;
  mapping_ = mapping;
  const char* base = static_cast<const char*>(addr);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(base[i]);
  check(n <= kMaxHeaderSize, path + ": header length " + std::to_string(n) +
                                 " exceeds the safetensors limit of " + std::to_string(kMaxHeaderSize) +
                                 " bytes (not a safetensors file?)");
  check(8 + n <= file_size, path + ": header length " + std::to_string(n) +
                                " runs past the end of the file (" + std::to_string(file_size) +
                                " bytes; expected 8 + header length <= file size)");
  const char* header = base + 8;
  check(n > 0 && header[0] == '{', path + ": header does not start with '{' (expected a JSON object)");

  // Duplicate top-level names are forbidden by the format; nlohmann would silently keep the last one.
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t ev,
                                                   nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json hdr;
  try {
    hdr = nlohmann::json::parse(header, header + n, on_event);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path + ": header is not valid JSON (" + e.what() + ")");
  }
  check(hdr.is_object(), path + ": header is not a JSON object");
  check(duplicate.empty(), path + ": tensor name '" + duplicate + "' appears twice in the header");

  for (auto it = hdr.begin(); it != hdr.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      check(v.is_object(), path + ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        check(m.value().is_string(), path + ": __metadata__ value of '" + m.key() + "' is " +
                                         json_snippet(m.value()) + " (expected a string)");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    check(v.is_object(), where + ": expected an object with dtype, shape, data_offsets");
    check(v.contains("dtype") && v["dtype"].is_string(), where + ": missing string field dtype");
    check(v.contains("shape"), where + ": missing field shape");
    check(v.contains("data_offsets"), where + ": missing field data_offsets");
    TensorEntry e;
    e.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    // F8_E4M3 (FP8 checkpoints' weights) is read as its bytes, U8; the model loader decodes it (quant/).
    const bool fp8 = dt == "F8_E4M3";
    if (fp8) e.dtype = DType::U8;
    check(fp8 || dtype_from_name(dt, &e.dtype),
          where + ": unsupported dtype '" + dt + "' (expected one of F32, BF16, F16, I32, I64, U8, F8_E4M3)");
    std::vector<uint64_t> dims, offsets;
    check(read_u64_array(v["shape"], &dims),
          where + ": shape " + json_snippet(v["shape"]) + " is not an array of non-negative integers");
    check(read_u64_array(v["data_offsets"], &offsets) && offsets.size() == 2,
          where + ": data_offsets " + json_snippet(v["data_offsets"]) + " is not [begin, end]");
    check(offsets[0] <= offsets[1], where + ": data_offsets begin " + std::to_string(offsets[0]) + " > end " +
                                        std::to_string(offsets[1]));
    uint64_t numel = 1;
    for (uint64_t d : dims) {
      check(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                (d == 0 || numel <= std::numeric_limits<uint64_t>::max() / 16 / d),
            where + ": shape " + json_snippet(v["shape"]) + " overflows");
      numel *= d;
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const uint64_t want = numel * dtype_size(e.dtype);
    check(offsets[1] - offsets[0] == want,
          where + ": data_offsets [" + std::to_string(offsets[0]) + ", " + std::to_string(offsets[1]) +
              ") hold " + std::to_string(offsets[1] - offsets[0]) + " bytes, expected " +
              std::to_string(want) + " for " + dt + " " + shape_str(e.shape));
    e.begin = offsets[0];
    e.end = offsets[1];
    entries_.push_back(std::move(e));
  }

  // The byte buffer must be covered exactly: sorted by offsets, first at 0, each next where the previous
  // ended, the last ending at the end of the file.
  std::sort(entries_.begin(), entries_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const TensorEntry& e : entries_) {
    if (e.begin != pos) {
      const std::string what = e.begin > pos ? "leaves a hole before it" : "overlaps";
      throw Error(path + ": tensor '" + e.name + "' at data_offsets [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + ") " + what + (prev ? " '" + *prev + "'" : std::string()) +
                  " (expected it to begin at byte " + std::to_string(pos) + ")");
    }
    pos = e.end;
    prev = &e.name;
  }
  const uint64_t data_size = file_size - 8 - n;
  check(pos == data_size, path + ": file is " + std::to_string(file_size) + " bytes, expected 8 + " +
                              std::to_string(n) + " + " + std::to_string(pos) + " = " +
                              std::to_string(8 + n + pos) + " from the header (" +
                              (pos > data_size ? "truncated" : "trailing bytes") + ")");
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  data_ = header + n;
}

SafetensorsFile::~SafetensorsFile() = default;

bool SafetensorsFile::has(const std::string& name) const {
  return index_.count(name) != 0;
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  check(it != index_.end(), path_ + ": no tensor named '" + name + "'");
  return entries_[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorEntry& e = entry(name);
  Tensor t;
  t.dtype = e.dtype;
  t.device = Device::CPU;
  t.shape = e.shape;
  const char* p = data_ + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0) {
    // Only files with an unpadded header land here (HF pads to 8); a copy keeps typed loads aligned.
    Tensor copy = host_tensor(e.shape, e.dtype);
    std::memcpy(copy.data, p, e.end - e.begin);
    return copy;
  }
  // Read-only mapping: the model code must convert/copy before writing (writes would fault).
  t.data = const_cast<char*>(p);
  t.storage = mapping_;
  return t;
}

// ------------------------------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check(fs::is_directory(dir, ec), dir + ": not a folder (expected a Hugging Face checkpoint folder)");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (fs::exists(index_path, ec)) {
    sharded_ = true;
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(read_text_file(index_path.string()));
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(index_path.string() + ": not valid JSON (" + e.what() + ")");
    }
    check(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(),
          index_path.string() + ": missing object field weight_map");
    std::map<std::string, size_t> file_slot;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      check(it.value().is_string(),
            index_path.string() + ": weight_map entry '" + it.key() + "' is not a file name string");
      file_slot.emplace(it.value().get<std::string>(), 0);
    }
    check(!file_slot.empty(), index_path.string() + ": weight_map is empty");
    for (auto& [file, slot] : file_slot) {
      check(file.find('/') == std::string::npos && file != "..",
            index_path.string() + ": shard name '" + file + "' must be a plain file name in the same folder");
      const fs::path shard = fs::path(dir) / file;
      check(fs::exists(shard, ec),
            shard.string() + ": shard listed in model.safetensors.index.json is missing");
      slot = files_.size();
      files_.push_back(std::make_unique<SafetensorsFile>(shard.string()));
    }
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      const size_t slot = file_slot.at(it.value().get<std::string>());
      check(files_[slot]->has(it.key()), files_[slot]->path() + ": has no tensor '" + it.key() +
                                             "' although model.safetensors.index.json puts it there");
      where_[it.key()] = slot;
    }
  } else if (fs::exists(single_path, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path.string()));
    for (const TensorEntry& e : files_[0]->entries()) where_[e.name] = 0;
  } else {
    throw Error(dir +
                ": no model.safetensors or model.safetensors.index.json (expected a Hugging Face "
                "safetensors checkpoint)");
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;  // std::map keeps them sorted
}

bool CheckpointReader::has(const std::string& name) const {
  return where_.count(name) != 0;
}

const TensorEntry& CheckpointReader::entry(const std::string& name) const {
  auto it = where_.find(name);
  check(it != where_.end(), dir_ + ": checkpoint has no tensor '" + name + "'");
  return files_[it->second]->entry(name);
}

Tensor CheckpointReader::get(const std::string& name) const {
  auto it = where_.find(name);
  check(it != where_.end(), dir_ + ": checkpoint has no tensor '" + name + "'");
  return files_[it->second]->get(name);
}

std::string CheckpointReader::file_of(const std::string& name) const {
  auto it = where_.find(name);
  check(it != where_.end(), dir_ + ": checkpoint has no tensor '" + name + "'");
  return std::filesystem::path(files_[it->second]->path()).filename().string();
}

std::vector<std::string> CheckpointReader::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(std::filesystem::path(f->path()).filename().string());
  return out;
}

// ------------------------------------------------------------------------------------------------------

void safetensors_write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // docs/peft-adapter.md §7.4: alignment (element size) descending, then name; offsets consecutive from 0.
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string> names;
  for (const auto& nt : tensors) {
    check(!nt.first.empty() && nt.first != "__metadata__", path + ": invalid tensor name '" + nt.first + "'");
    check(names.insert(nt.first).second, path + ": tensor '" + nt.first + "' given twice");
    check(nt.second.device == Device::CPU, path + ": tensor '" + nt.first + "' is not a host tensor");
    check(nt.second.data != nullptr || nt.second.numel() == 0,
          path + ": tensor '" + nt.first + "' has no data");
    for (int64_t d : nt.second.shape)
      check(d >= 0, path + ": tensor '" + nt.first + "' has a negative dimension");
    order.push_back(&nt);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t sa = dtype_size(a->second.dtype), sb = dtype_size(b->second.dtype);
    return sa != sb ? sa > sb : a->first < b->first;
  });

  nlohmann::ordered_json hdr;
  nlohmann::ordered_json meta;
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  hdr["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto* nt : order) {
    const Tensor& t = nt->second;
    nlohmann::ordered_json info;
    info["dtype"] = dtype_name(t.dtype);
    info["shape"] = t.shape;
    info["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    hdr[nt->first] = std::move(info);
  }
  std::string header = hdr.dump();
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicFileWriter out(path);
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(header.data(), header.size());
  for (const auto* nt : order) out.write(nt->second.data, nt->second.nbytes());
  out.commit();
}

}  // namespace deltatune
