// launch_local_workers: one worker process per GPU of this machine, watched until all end.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/cuda_driver.h"
#include "core/error.h"
#include "deltatune/distributed.h"
#include "deltatune/experiment_store.h"

extern char** environ;

namespace deltatune {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_forward_signal{0};  // the launcher's SIGINT/SIGTERM, passed on by the wait loop
extern "C" void on_launcher_signal(int sig) { g_forward_signal.store(sig); }

// A port the kernel just handed out: free now, and rank 0 binds it a moment later.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check(fd >= 0, std::string("launcher: cannot create a socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  check(ok, "launcher: cannot find a free TCP port on 127.0.0.1");
  return ntohs(a.sin_port);
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

}  // namespace

int visible_cuda_devices() { return static_cast<int>(probe_cuda_driver().devices.size()); }

int launch_local_workers(const LocalLaunch& l) {
  check(l.workers >= 1, "launcher: needs at least one worker");
  auto log = [&](const std::string& m) {
    if (l.log) l.log(m);
  };
  const int port = free_port();
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string k = kv.substr(0, kv.find('='));
    if (k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" ||
        k == "MASTER_PORT" || k.rfind("SLURM_", 0) == 0)
      continue;  // this launcher's job, not an outer one
    base_env.push_back(kv);
  }
  // NVLink multicast (NVLS) can put a shared host's GPUs out of service; the LoRA all-reduce gains nothing
  // from it. A value the user set is kept.
  if (!std::getenv("NCCL_NVLS_ENABLE")) base_env.push_back("NCCL_NVLS_ENABLE=0");

  struct sigaction sa {}, old_int{}, old_term{};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  g_forward_signal.store(0);

  std::vector<pid_t> pids(static_cast<size_t>(l.workers), -1);
  std::vector<bool> done(pids.size(), false);
  for (int r = 0; r < l.workers; ++r) {
    std::vector<std::string> env = base_env;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(l.workers));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(l.workers));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    std::vector<char*> argv{const_cast<char*>(l.exe.c_str())}, envp;
    for (const auto& a : l.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::execve(l.exe.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "launcher: cannot start %s: %s\n", l.exe.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    if (pid < 0) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      throw Error(std::string("launcher: fork failed: ") + std::strerror(errno));
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  log("started " + std::to_string(l.workers) + " workers (MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
      std::to_string(port) + ")");

  int first_failure = 0, running = l.workers;
  Clock::time_point failed_at{}, termed_at{};
  bool termed = false, killed = false;
  while (running > 0) {
    if (const int sig = g_forward_signal.exchange(0)) {
      // A terminal's Ctrl-C already reached the workers (same process group); a kill of the launcher did not.
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) ::kill(pids[r], sig);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] != pid || done[r]) continue;
        done[r] = true;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok) {
          log("worker " + std::to_string(r) + " (pid " + std::to_string(pid) + ") " + exit_text(status));
          if (first_failure == 0) {
            first_failure = exit_code(status);
            failed_at = Clock::now();
          }
        }
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    if (first_failure != 0) {
      const double since = std::chrono::duration<double>(Clock::now() - failed_at).count();
      if (!termed && since > l.grace_s) {
        log("stopping the " + std::to_string(running) + " remaining worker(s)");
        for (size_t r = 0; r < pids.size(); ++r)
          if (!done[r]) ::kill(pids[r], SIGTERM);
        termed = true;
        termed_at = Clock::now();
      } else if (termed && !killed && std::chrono::duration<double>(Clock::now() - termed_at).count() > 5) {
        for (size_t r = 0; r < pids.size(); ++r)
          if (!done[r]) ::kill(pids[r], SIGKILL);
        killed = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (first_failure != 0 && l.db_path != "-") {
    try {  // a worker 0 that died left its run `running`: crashed, resumable
      ExperimentStore store(l.db_path.empty() ? ExperimentStore::default_path() : l.db_path);
      store.mark_crashed_runs();
    } catch (const std::exception& e) {
      log(std::string("could not update the experiment database: ") + e.what());
    }
  }
  return first_failure;
}

}  // namespace deltatune
