// Runs the built `deltatune` binary (DT_CLI_PATH) with arguments and collects what a user sees (stdout and stderr).
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

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

}  // namespace deltatune::testing_cli
