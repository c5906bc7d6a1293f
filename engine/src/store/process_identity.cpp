#include "store/process_identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

namespace deltatune {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// Fields of /proc/<pid>/stat after "(comm)": [0] = state (field 3), [19] = starttime (field 22). comm may
// hold spaces and parentheses, hence the last ')'.
std::vector<std::string> stat_fields(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all;
  if (!in || !std::getline(in, all)) return {};
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(all.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

}  // namespace

std::string host_id() {
  std::string id = first_line("/etc/machine-id");
  if (!id.empty()) return id;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) return name;
  return "";
}

std::string boot_id() {
  return first_line("/proc/sys/kernel/random/boot_id");
}

std::string process_start_time(int64_t pid) {
  const auto f = stat_fields(pid);
  return f.size() > 19 ? f[19] : "";
}

ProcessState process_state(int64_t pid, const std::string& host, const std::string& boot,
                           const std::string& start_time) {
  if (!host.empty() && host != host_id()) return ProcessState::Unknown;
  if (!boot.empty() && !boot_id().empty() && boot != boot_id()) return ProcessState::Dead;
  if (pid <= 0) return ProcessState::Dead;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return ProcessState::Dead;
  const auto f = stat_fields(pid);
  if (!f.empty()) {
    if (f[0] == "Z" || f[0] == "X") return ProcessState::Dead;  // exited, not yet reaped
    if (!start_time.empty() && f.size() > 19 && f[19] != start_time) return ProcessState::Dead;  // pid reused
  }
  return ProcessState::Alive;
}

}  // namespace deltatune
