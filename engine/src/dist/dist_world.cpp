// DistWorld from the launcher's environment variables, --gpus parsing and the worker's GPU.
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "deltatune/distributed.h"

namespace deltatune {
namespace {

struct Env {
  const EnvLookup& get;
  const char* raw(const char* name) const {
    const char* v = get ? get(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }
  int64_t integer(const char* name, int64_t lo, int64_t hi) const {
    const char* v = raw(name);
    check(v != nullptr, std::string("distributed training: ") + name + " is not set");
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v, &end, 10);
    check(errno == 0 && end && *end == '\0' && x >= lo && x <= hi,
          std::string("distributed training: ") + name + "='" + v + "' is not valid (expected an integer in [" +
              std::to_string(lo) + ", " + std::to_string(hi) + "])");
    return x;
  }
  double seconds(const char* name, double fallback) const {
    const char* v = raw(name);
    if (!v) return fallback;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    check(end && *end == '\0' && x > 0, std::string(name) + "='" + v + "' is not valid (expected seconds > 0)");
    return x;
  }
};

}  // namespace

DistWorld dist_world_from_env(const EnvLookup& getenv_fn) {
  const Env env{getenv_fn};
  DistWorld w;
  constexpr int64_t kMax = 1 << 20;
  const char *rank_var = nullptr, *world_var = nullptr, *local_var = nullptr, *local_world_var = nullptr;
  if (env.has("RANK") || env.has("WORLD_SIZE")) {
    w.source = "torchrun";
    rank_var = "RANK", world_var = "WORLD_SIZE", local_var = "LOCAL_RANK", local_world_var = "LOCAL_WORLD_SIZE";
  } else if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    w.source = "slurm";
    rank_var = "SLURM_PROCID", world_var = "SLURM_NTASKS", local_var = "SLURM_LOCALID";
    local_world_var = "SLURM_NTASKS_PER_NODE";
  } else {
    return w;
  }
  w.world_size = static_cast<int>(env.integer(world_var, 1, kMax));
  w.rank = static_cast<int>(env.integer(rank_var, 0, w.world_size - 1));
  w.local_rank = env.has(local_var) ? static_cast<int>(env.integer(local_var, 0, w.world_size - 1)) : 0;
  // SLURM_NTASKS_PER_NODE may be a list ("2(x3)"): only a plain number is taken.
  w.local_world_size = 1;
  if (const char* lw = env.raw(local_world_var)) {
    char* end = nullptr;
    const long long x = std::strtoll(lw, &end, 10);
    if (end && *end == '\0' && x >= 1) w.local_world_size = static_cast<int>(x);
  }
  w.timeout_s = env.seconds("DELTATUNE_DIST_TIMEOUT", w.timeout_s);
  w.join_timeout_s = env.seconds("DELTATUNE_DIST_JOIN_TIMEOUT", w.join_timeout_s);
  if (w.world_size == 1) return w;
  const char* addr = env.raw("MASTER_ADDR");
  check(addr != nullptr, std::string("distributed training: ") + world_var + "=" + std::to_string(w.world_size) +
                             " but MASTER_ADDR is not set (expected the host name or address of rank 0" +
                             (w.source == "slurm" ? "; in an sbatch script: export MASTER_ADDR=$(scontrol show "
                                                    "hostnames $SLURM_JOB_NODELIST | head -n 1)"
                                                  : "") +
                             ")");
  w.master_addr = addr;
  w.master_port = static_cast<int>(env.integer("MASTER_PORT", 1, 65535));
  return w;
}

GpuSelection parse_gpu_list(const std::string& text) {
  GpuSelection s;
  if (text == "all") {
    s.all = true;
    return s;
  }
  const std::string what = "--gpus '" + text + "' is not valid (expected GPU indices like 0,1 or 'all')";
  check(!text.empty(), what);
  std::set<int> seen;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = text.find(',', i);
    const std::string item = text.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    check(!item.empty() && item.find_first_not_of("0123456789") == std::string::npos && item.size() <= 6, what);
    const int id = std::stoi(item);
    check(seen.insert(id).second, "--gpus '" + text + "': GPU " + item + " is listed twice");
    s.ids.push_back(id);
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  return s;
}

int worker_gpu(const DistWorld& world, const std::vector<int>& ids, int visible_devices) {
  if (visible_devices == 1) return 0;
  if (ids.empty()) return world.local_rank;
  check(world.local_rank < static_cast<int>(ids.size()),
        "worker with LOCAL_RANK " + std::to_string(world.local_rank) + " has no GPU: the run lists " +
            std::to_string(ids.size()) + " GPU(s) for this machine (gpus / --gpus); start at most that many "
            "workers per machine");
  return ids[static_cast<size_t>(world.local_rank)];
}

}  // namespace deltatune
