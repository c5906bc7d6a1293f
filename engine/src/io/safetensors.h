// safetensors read (mmap, zero-copy) and write (atomic). Format: docs/peft-adapter.md §7.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace deltatune {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t begin = 0, end = 0;  // data offsets relative to the byte buffer
};

// One .safetensors file, memory-mapped and fully validated on open (header length vs file size, JSON,
// dtypes, shapes vs byte sizes, offsets in range, contiguous without holes or overlaps).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error naming the path and the problem
  ~SafetensorsFile();
  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const TensorEntry& entry(const std::string& name) const;  // throws if absent
  Tensor get(const std::string& name) const;  // host tensor viewing the mmap (keeps it alive)

 private:
  std::string path_;
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<void> mapping_;
  const char* data_ = nullptr;
};

// A checkpoint folder: model.safetensors, or shards listed by model.safetensors.index.json (every shard
// must exist and every name must be in the shard the index says).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // all tensor names, sorted
  bool has(const std::string& name) const;
  const TensorEntry& entry(const std::string& name) const;
  Tensor get(const std::string& name) const;
  std::string file_of(const std::string& name) const;  // shard file name (relative)
  std::vector<std::string> files() const;               // shard file names in order
  bool sharded() const { return sharded_; }

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

// Writes `tensors` (host tensors) to `path` atomically: temp file in the same folder, fsync, rename.
// __metadata__ gets {"format": "pt"} plus `metadata`. Throws Error naming the path (e.g. disk full).
void safetensors_write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace deltatune
