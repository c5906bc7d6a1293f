#include <csignal>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "console_observer.h"
#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"

namespace deltatune::cli {
namespace {

RunControl* g_control = nullptr;  // only for the SIGINT handler: it sets an atomic flag, nothing else
extern "C" void on_sigint(int) {
  if (g_control) g_control->stop.store(true);
}

}  // namespace

int cmd_train(const Args& args) {
  const ParsedArgs p = parse_args(args, {"--resume", "--db", "--backend", "--max-steps", "--output-dir"}, {});
  check(p.positionals.size() == 1 || (p.positionals.empty() && p.has("--resume")),
        "usage: deltatune train RUN.yaml [--resume RUN] [--db PATH] [--backend cpu|cuda|auto] [--max-steps N]");
  RunConfig cfg;
  if (!p.positionals.empty()) cfg = run_config_from_yaml_file(p.positionals[0]);
  if (p.has("--backend")) cfg.backend = p.get("--backend");
  if (p.has("--output-dir")) cfg.output_dir = p.get("--output-dir");
  if (p.has("--max-steps")) cfg.max_steps = std::stoll(p.get("--max-steps"));
  TrainOptions opts;
  opts.db_path = p.get("--db");
  opts.resume_run = p.get("--resume");
  RunControl control;
  g_control = &control;
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  ConsoleObserver obs(cfg.logging_steps);
  const std::string id = train_run(cfg, obs, control, opts);
  g_control = nullptr;
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
