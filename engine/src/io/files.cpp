#include "io/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace deltatune {

namespace {
std::string errno_str(int err) {
  return std::strerror(err);
}
}  // namespace

std::string read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, path + ": cannot open (" + errno_str(errno) + ")");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": read failed (" + errno_str(err) + ")");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  check(p.has_filename(), path + ": not a file path");
  dir_ = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  std::string name = ".";  // built stepwise: GCC 12 gives a false -Wrestrict on "." + s + "..."
  name += p.filename().string();
  name += ".tmp.";
  // Temp files of earlier writes of this file whose process was killed ("<prefix><pid>.XXXXXX") go first.
  const std::string prefix = name;
  remove_leftovers_of_dead_writers(dir_, [&](const fs::directory_entry& e) -> int64_t {
    const std::string n = e.path().filename().string();
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) return 0;
    const size_t end = n.find('.', prefix.size());
    if (end == std::string::npos || end == prefix.size() || end - prefix.size() > 9) return 0;
    int64_t pid = 0;
    for (size_t i = prefix.size(); i < end; ++i) {
      if (n[i] < '0' || n[i] > '9') return 0;
      pid = pid * 10 + (n[i] - '0');
    }
    return pid;
  });
  name += std::to_string(::getpid());
  name += ".XXXXXX";
  tmp_ = (fs::path(dir_) / name).string();
  fd_ = ::mkstemp(tmp_.data());
  check(fd_ >= 0, path + ": cannot create a temporary file in " + dir_ + " (" + errno_str(errno) + ")");
  ::fchmod(fd_, 0644);  // mkstemp makes 0600; checkpoints are meant to be shared like HF's
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  check(fd_ >= 0 && !committed_, path_ + ": internal: write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    check(w > 0, path_ + ": write failed (" + errno_str(w < 0 ? errno : EIO) + ")");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  check(fd_ >= 0 && !committed_, path_ + ": internal: commit twice");
  // errno is read in statements of its own: in check(call() == 0, ... errno ...) the message may be built
  // first.
  const int synced = ::fsync(fd_), sync_err = errno;
  check(synced == 0, path_ + ": fsync failed (" + errno_str(sync_err) + ")");
  const int rc = ::close(fd_), close_err = errno;
  fd_ = -1;
  check(rc == 0, path_ + ": close failed (" + errno_str(close_err) + ")");
  const int renamed = ::rename(tmp_.c_str(), path_.c_str()), rename_err = errno;
  check(renamed == 0, path_ + ": rename from temporary file failed (" + errno_str(rename_err) + ")");
  committed_ = true;
  // The rename is durable only once the folder entry is on disk.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_text_file_atomic(const std::string& path, const std::string& content) {
  AtomicFileWriter out(path);
  out.write(content.data(), content.size());
  out.commit();
}

void remove_leftovers_of_dead_writers(
    const std::string& dir,
    const std::function<int64_t(const std::filesystem::directory_entry&)>& owner_pid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t pid = owner_pid(e);
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      stale.push_back(e.path());
  }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

void check_dir_writable(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  const std::string where = what + " '" + dir + "'";
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, where + ": cannot create the folder (" + ec.message() + ")");
  check(fs::is_directory(dir, ec), where + ": not a folder");
  std::string probe = (fs::path(dir) / ".deltatune-write-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  check(fd >= 0, where + ": cannot write into the folder (" + errno_str(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace deltatune
