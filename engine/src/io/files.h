// Small file helpers shared by the readers and writers (checkpoints, configs, adapters).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace deltatune {

// Whole file as bytes. Throws Error naming the path.
std::string read_text_file(const std::string& path);

// Crash-safe replacement of `path`: data goes to a temp file in the same folder (".<name>.tmp.<pid>.XXXXXX"),
// which is fsync'ed and renamed over `path` on commit(), then the folder is fsync'ed. Without commit() (an
// exception, a full disk) the temp file is removed, so `path` is either the old file or the complete new one.
// A killed writer's temp file is removed by the next write of the same file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);  // throws Error naming the path
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // throws Error naming the path (e.g. "No space left on device")
  void commit();

 private:
  std::string path_, dir_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// read_text_file's counterpart: atomic write of a whole file.
void write_text_file_atomic(const std::string& path, const std::string& content);

// Creates `dir` if missing and proves a file can be created in it (a probe file, removed again), so a
// read-only or unusable folder is reported before hours of work are spent. Throws Error
// "<what> '<dir>': ..." with the system's reason (e.g. Permission denied, Read-only file system).
void check_dir_writable(const std::string& dir, const std::string& what);

// Removes the entries of folder `dir` that `owner_pid` attributes to a writer process that no longer exists
// (the leftovers of a killed write). Entries it gives no pid for (<= 0), this process's own and those of a
// live process (maybe writing right now) stay. A missing folder is no error.
void remove_leftovers_of_dead_writers(
    const std::string& dir, const std::function<int64_t(const std::filesystem::directory_entry&)>& owner_pid);

}  // namespace deltatune
