// `deltatune demo`: a real (small) training run of the bundled tiny Qwen3.5 model on the bundled chat
// dataset, headless. Works on any machine (CPU backend when no GPU).
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "console_observer.h"
#include "deltatune/error.h"
#include "deltatune/program_path.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"

namespace fs = std::filesystem;

namespace deltatune::cli {
namespace {

// The demo folder next to the build tree (resources/demo) or the installed share folder.
fs::path find_demo_dir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DELTATUNE_DEMO_DIR")) candidates.emplace_back(env);
  const fs::path exe = program_path();
  if (!exe.empty()) {
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      candidates.push_back(p / "resources" / "demo");
      candidates.push_back(p / "share" / "deltatune" / "demo");
    }
  }
  candidates.emplace_back("/usr/share/deltatune/demo");
  for (const auto& c : candidates)
    if (fs::exists(c / "demo_run.yaml")) return c;
  throw Error("cannot find the bundled demo (resources/demo/demo_run.yaml); set DELTATUNE_DEMO_DIR");
}

}  // namespace

int cmd_demo(const Args& args) {
  const ParsedArgs p = parse_args(args, {"--out", "--db", "--backend", "--max-steps"}, {});
  const fs::path demo = find_demo_dir();
  RunConfig cfg = run_config_from_yaml_file((demo / "demo_run.yaml").string());
  // Asked for, a folder holding a run's output is refused by train_run; by default the next demo gets
  // runs/demo-2.
  cfg.output_dir =
      p.has("--out") ? p.get("--out") : output_dir_unused((fs::current_path() / "runs" / "demo").string());
  if (p.has("--backend")) cfg.backend = backend_option(p);
  if (p.has("--max-steps")) cfg.max_steps = max_steps_option(p.get("--max-steps"));
  std::cerr << "[info] demo: " << (demo / "demo_run.yaml").string() << " -> " << cfg.output_dir << "\n";
  RunControl control;
  ConsoleObserver obs(cfg.logging_steps);
  TrainOptions opts;
  opts.db_path = p.get("--db");
  const std::string id = train_run(cfg, obs, control, opts);
  std::cout << "demo run " << id << " finished; PEFT adapter in " << cfg.output_dir << "\n";
  return 0;
}

}  // namespace deltatune::cli
