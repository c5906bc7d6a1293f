// Training runs. Synchronous: the studio calls train_run on a worker thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "deltatune/distributed.h"
#include "deltatune/run_config.h"

namespace deltatune {

struct StepMetrics {
  int64_t step = 0;            // optimizer step, 1-based
  int64_t total_steps = 0;
  double epoch = 0;
  double loss = 0;             // mean CE over the trained targets of the step
  double eval_loss = -1;       // < 0 when not evaluated at this step
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_second = 0;
  int64_t tokens_seen = 0;     // all tokens (incl. untrained) processed so far
  int64_t trained_tokens = 0;  // targets of this step
  int64_t vram_allocated = 0, vram_reserved = 0;
  double wall_seconds = 0;     // since the run started
  // MoE router load balance over the step's tokens, averaged over MoE layers (-1 for dense models):
  // max/mean tokens per expert (1 = balanced) and the coefficient of variation std/mean (0 = balanced).
  double moe_load_max_ratio = -1, moe_load_cv = -1;
};

enum class LogLevel { Info, Warning, Error };

// Callbacks come from the thread that runs the trainer.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_log(LogLevel level, const std::string& message) {}
  virtual void on_started(const std::string& run_id, int64_t total_steps) {}
  virtual void on_step(const StepMetrics& m) {}
  virtual void on_checkpoint(int64_t step, const std::string& path) {}
  // status: finished | cancelled | failed
  virtual void on_finished(const std::string& status, const std::string& message) {}
};

// Cooperative controls, checked between steps.
struct RunControl {
  std::atomic<bool> stop{false};   // stop at the next step boundary, checkpoint, status cancelled
  std::atomic<bool> pause{false};  // wait at the next step boundary while set
};

struct TrainOptions {
  std::string db_path;      // "" = default experiment database; "-" = none
  std::string resume_run;   // run id or name to resume ("" = new run)
  // This process's place in a data-parallel job (dist_world_from_env); world_size 1 = a single process. In a
  // job, rank 0 alone writes the database, checkpoints and the adapter, and reports the global loss.
  DistWorld dist;
  // GPUs of this machine for the run (--gpus), overriding the config's gpus / gpu; a worker of a job takes
  // gpus[LOCAL_RANK].
  std::vector<int> gpus;
  // After every step, every worker hashes its LoRA weights and the run fails unless all hashes agree (rank 0
  // logs the hash): a check that data parallelism keeps the replicas bit-identical.
  bool check_replicas = false;
};

// Runs a whole training run. Returns the run id. Errors in the config or data throw deltatune::Error
// before training starts; errors during training are reported through on_finished("failed") and
// rethrown.
std::string train_run(const RunConfig& cfg, RunObserver& observer, RunControl& control,
                      const TrainOptions& opts = {});

// `output_dir`, or the first of `output_dir`-2, -3, ... that holds no run's adapter or checkpoints: a folder a
// new run may write (train_run refuses one holding another run's output), for callers that choose the folder
// themselves, as the demo does.
std::string output_dir_unused(const std::string& output_dir);

}  // namespace deltatune
