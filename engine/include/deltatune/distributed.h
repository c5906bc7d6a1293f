// Data-parallel training over several GPUs: one worker process per GPU, on one machine or many.
//
// Why processes, not threads: a worker is then the same program whether this machine's launcher started it
// (`deltatune train --gpus 0,1` re-runs itself once per GPU) or torchrun / srun / any launcher did on a
// cluster, so the local and the multi-node case are one code path; each worker owns its CUDA context,
// allocator and NCCL communicator with no shared mutable state; and a worker that dies is a dead child
// process its launcher sees at once (waitpid) and a closed socket its peers see at once, never a hung thread
// inside a process that must keep running.
//
// Workers find each other from the variables torchrun and Slurm already set: RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT (else SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID with MASTER_ADDR/MASTER_PORT).
// Rank 0 listens on MASTER_PORT; every other rank connects to MASTER_ADDR:MASTER_PORT. Those connections carry
// NCCL's unique id (NCCL's own bootstrap then joins the communicator), small host values (loss, flags) and
// stay open for the whole run as the liveness channel: a worker that ends closes them.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace deltatune {

struct DistWorld {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr;  // rank 0's host
  int master_port = 0;
  std::string source;       // "torchrun" | "slurm" | "" (a single process)
  // A collective or host exchange that has not completed after this many seconds ends the run (a worker hung
  // or unreachable); DELTATUNE_DIST_TIMEOUT. Joining (every rank connecting) waits join_timeout_s
  // (DELTATUNE_DIST_JOIN_TIMEOUT): ranks load models at different speeds.
  double timeout_s = 600;
  double join_timeout_s = 900;
  bool active() const { return world_size > 1; }
};

// The calling process's place in a job, from the environment (getenv by default; tests pass a map).
// world_size 1 when no launcher variables are set. Throws Error naming the variable when a set is incomplete
// or inconsistent (RANK without WORLD_SIZE, RANK >= WORLD_SIZE, no MASTER_ADDR, ...).
using EnvLookup = std::function<const char*(const char*)>;
DistWorld dist_world_from_env(const EnvLookup& getenv_fn = {});

// Parses a --gpus value: "0,1,3" or "all". Throws Error naming the value.
struct GpuSelection {
  std::vector<int> ids;
  bool all = false;
};
GpuSelection parse_gpu_list(const std::string& text);

// The GPU index a worker of `world` trains on: ids[local_rank] when a list is given, else local_rank; when
// the launcher gave each worker only its own GPU (visible_devices == 1), that one (0).
int worker_gpu(const DistWorld& world, const std::vector<int>& ids, int visible_devices);

// Number of CUDA devices this process sees (0 without a driver or without the CUDA backend).
int visible_cuda_devices();

// This machine's launcher: runs `args` of `exe` once per GPU with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT set, waits for them, and when one fails
// (non-zero exit, killed by a signal) gives the others `grace_s` seconds to stop on their own (they see the
// closed connection and end the run as crashed), then SIGTERM, then SIGKILL. SIGINT / SIGTERM to the launcher
// reach the workers (a cooperative stop with a checkpoint). Afterwards marks runs left `running` by a dead
// worker as crashed in db_path ("-": none). Returns 0 when every worker succeeded, else the first failing
// worker's exit code (128 + signal when killed).
struct LocalLaunch {
  std::string exe;                // normally /proc/self/exe
  std::vector<std::string> args;  // argv[1..] of each worker
  int workers = 1;
  std::string db_path;            // "" = the default experiment database
  double grace_s = 10;
  std::function<void(const std::string&)> log;  // progress and fault lines
};
int launch_local_workers(const LocalLaunch& launch);

}  // namespace deltatune
