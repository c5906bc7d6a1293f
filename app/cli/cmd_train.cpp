#include <csignal>
#include <cstdlib>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "console_observer.h"
#include "deltatune/distributed.h"
#include "deltatune/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"

namespace deltatune::cli {
namespace {

RunControl* g_control = nullptr;  // only for the SIGINT handler: it sets an atomic flag, nothing else
extern "C" void on_sigint(int) {
  if (g_control) g_control->stop.store(true);
}

// A worker other than rank 0 prints only warnings and errors, tagged with its rank (rank 0 reports the run).
class WorkerObserver : public RunObserver {
 public:
  explicit WorkerObserver(int rank) : rank_(rank) {}
  void on_log(LogLevel level, const std::string& message) override {
    if (level == LogLevel::Info) return;
    std::fprintf(stderr, "[rank %d %s] %s\n", rank_, level == LogLevel::Error ? "error" : "warning", message.c_str());
  }
  void on_finished(const std::string& status, const std::string& message) override {
    if (status != "finished") std::fprintf(stderr, "[rank %d %s] %s\n", rank_, status.c_str(), message.c_str());
  }

 private:
  int rank_;
};

// The config a run starts from as far as the launcher needs it (gpus, backend): on a resume the stored run's, the
// backend from --backend or the run file when given. A worker of a job does not read the database (its machine may
// have none): its launcher passes --gpus, and a resumed run's gpus reach it with the config from worker 0.
RunConfig starting_config(const ParsedArgs& p, const RunConfig& cfg, const std::string& db_path, bool worker) {
  if (!p.has("--resume") || db_path == "-" || worker) return cfg;
  const auto r = ExperimentStore(db_path.empty() ? ExperimentStore::default_path() : db_path).find_run(p.get("--resume"));
  if (!r) return cfg;
  RunConfig stored = run_config_from_yaml_string(r->config_yaml, ".");
  if (p.has("--backend") || !p.positionals.empty()) stored.backend = cfg.backend;
  return stored;
}

// The GPUs a run asks for on this machine: --gpus, else the run file's (or, on a resume, the run's) gpus.
GpuSelection requested_gpus(const ParsedArgs& p, const RunConfig& start) {
  if (p.has("--gpus")) return parse_gpu_list(p.get("--gpus"));
  return GpuSelection{start.gpus, start.gpus_all};
}

// GPUs named by index must exist on this machine. Without any visible GPU, backend auto trains one worker on the
// CPU as before, but several listed GPUs are refused (CPU workers are asked for with backend: cpu).
void check_gpus_exist(const GpuSelection& gpus, const std::string& backend, const std::string& source) {
  if (backend == "cpu" || gpus.ids.empty()) return;
  const int visible = visible_cuda_devices();
  if (visible == 0 && (backend != "auto" || gpus.ids.size() == 1)) return;  // cuda: the backend says what is missing
  const std::string shown = visible == 0 ? std::string("this machine shows no CUDA GPU")
                                         : "this machine shows " + std::to_string(visible) + " CUDA GPU(s), 0 to " +
                                               std::to_string(visible - 1) + " (nvidia-smi; CUDA_VISIBLE_DEVICES)";
  for (int id : gpus.ids)
    check(id < visible, source + ": GPU " + std::to_string(id) + " does not exist: " + shown +
                            "; for several workers on the CPU set backend: cpu");
}

}  // namespace

int cmd_train(const Args& args) {
  const ParsedArgs p = parse_args(args, {"--resume", "--db", "--backend", "--max-steps", "--output-dir", "--gpus"},
                                  {"--check-replicas"});
  check(p.positionals.size() == 1 || (p.positionals.empty() && p.has("--resume")),
        "usage: deltatune train RUN.yaml [--resume RUN] [--gpus 0,1|all] [--db PATH] [--backend cpu|cuda|auto] "
        "[--max-steps N]");
  RunConfig cfg;
  if (!p.positionals.empty()) cfg = run_config_from_yaml_file(p.positionals[0]);
  if (p.has("--backend")) cfg.backend = backend_option(p);
  if (p.has("--output-dir")) cfg.output_dir = p.get("--output-dir");
  if (p.has("--max-steps")) cfg.max_steps = max_steps_option(p.get("--max-steps"));
  TrainOptions opts;
  opts.db_path = p.get("--db");
  opts.resume_run = p.get("--resume");
  opts.check_replicas = p.has("--check-replicas");
  opts.dist = dist_world_from_env();
  const RunConfig start = starting_config(p, cfg, opts.db_path, opts.dist.active());
  const GpuSelection gpus = requested_gpus(p, start);
  opts.gpus = gpus.ids;

  if (!opts.dist.active()) {
    check_gpus_exist(gpus, start.backend,
                     p.has("--gpus") ? "--gpus " + p.get("--gpus")
                                     : (p.positionals.empty() ? std::string("the run's") : p.positionals[0]) + ": gpus");
    const int n = gpus.all ? visible_cuda_devices() : static_cast<int>(gpus.ids.size());
    check(!gpus.all || n > 0, "gpus: all, but no CUDA GPU is visible (check nvidia-smi, or train on the CPU)");
    if (n > 1) {  // this machine's launcher: one worker per GPU, each this program with the same arguments
      LocalLaunch l;
      l.exe = "/proc/self/exe";
      l.args.push_back("train");
      l.args.insert(l.args.end(), args.begin(), args.end());
      if (!p.has("--gpus")) {  // the workers take their GPU from the list, whatever the config said
        std::string list;
        for (int i = 0; i < n; ++i) list += (i ? "," : "") + std::to_string(gpus.all ? i : gpus.ids[i]);
        l.args.insert(l.args.end(), {"--gpus", list});
      }
      l.workers = n;
      l.db_path = opts.db_path;
      l.log = [](const std::string& m) { std::fprintf(stderr, "[launcher] %s\n", m.c_str()); };
      const int rc = launch_local_workers(l);
      if (rc != 0) std::fprintf(stderr, "error: the run ended because a worker failed (see above)\n");
      return rc == 0 ? 0 : 1;
    }
    if (gpus.all && n == 1) opts.gpus = {0};
  } else if (!std::getenv("NCCL_NVLS_ENABLE")) {
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast can take a shared host's GPUs out of service
  }

  RunControl control;
  g_control = &control;
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  ConsoleObserver console(cfg.logging_steps);
  WorkerObserver quiet(opts.dist.rank);
  RunObserver& obs = opts.dist.rank == 0 ? static_cast<RunObserver&>(console) : quiet;
  const std::string id = train_run(cfg, obs, control, opts);
  g_control = nullptr;
  if (opts.dist.rank != 0) return 0;
  std::string out = cfg.output_dir;
  if (p.positionals.empty()) {  // a resume: the run's own config, not the defaults above, says where
    try {
      const auto r = ExperimentStore(opts.db_path.empty() ? ExperimentStore::default_path() : opts.db_path).find_run(id);
      if (r) out = r->output_dir;
    } catch (const std::exception&) {
    }
  }
  std::cout << "run " << id << " done; output in " << out << std::endl;
  return 0;
}

}  // namespace deltatune::cli
