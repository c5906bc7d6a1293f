// Runs the built `deltatune` binary (DT_CLI_PATH) with arguments and collects what a user sees (stdout and stderr);
// or starts it in the background with its output in a log file, for the tests that kill it or run several at once.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace deltatune::testing_cli {

struct CliResult {
  int rc = -1;      // exit status; -1 when it did not exit normally
  std::string out;  // stdout and stderr
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(DT_CLI_PATH) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  CliResult r;
  if (!f) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(f);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Starts `args` (args[0] the program's path) in a process group of its own, stdout and stderr appended to `log`,
// with `env` ("NAME=value") added to its environment; the caller waits with wait_exit().
inline pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& log,
                   const std::vector<std::string>& env = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The exit status of `pid`, as a shell gives it: 128 + the signal for a process that was killed.
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace deltatune::testing_cli
