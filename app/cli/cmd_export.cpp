// deltatune export RUN [--checkpoint N] --out DIR [--merged] [--class causal_lm|conditional_generation]
// deltatune export --adapter DIR [--model DIR] (--out DIR [--merged] | --merged OUT)
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace deltatune::cli {
namespace {

std::string base_model_of_adapter(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "adapter_config.json");
  check(in.good(), dir + ": no adapter_config.json");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  check(!j.is_discarded() && j.is_object(), dir + "/adapter_config.json: not valid JSON");
  const auto it = j.find("base_model_name_or_path");
  check(it != j.end() && it->is_string() && fs::exists(it->get<std::string>()),
        dir + "/adapter_config.json: base_model_name_or_path is not a local folder; pass --model DIR");
  return it->get<std::string>();
}

}  // namespace

int cmd_export(const Args& raw) {
  // `--merged OUT` (issue 3 spelling) is `--merged --out OUT`.
  Args args;
  bool has_out = false;
  for (const auto& a : raw) has_out = has_out || a == "--out" || a.rfind("--out=", 0) == 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    args.push_back(raw[i]);
    if (raw[i] == "--merged" && !has_out && i + 1 < raw.size() && raw[i + 1].rfind("--", 0) != 0) {
      args.push_back("--out");
      args.push_back(raw[++i]);
    }
  }
  const ParsedArgs p = parse_args(args, {"--out", "--checkpoint", "--adapter", "--model", "--db", "--class"}, {"--merged"});
  check(p.has("--out"), "usage: deltatune export RUN [--checkpoint N] --out DIR [--merged] | "
                        "deltatune export --adapter DIR [--model DIR] --out DIR [--merged]");
  ExportOptions o;
  o.out_dir = p.get("--out");
  o.merged = p.has("--merged");
  o.model_class = p.get("--class", "auto");
  if (p.has("--adapter")) {
    check(p.positionals.empty(), "export: give either RUN or --adapter DIR, not both");
    o.adapter_dir = p.get("--adapter");
    o.model_dir = p.has("--model") ? p.get("--model") : base_model_of_adapter(o.adapter_dir);
  } else {
    check(p.positionals.size() == 1, "export: expected one RUN (id or name) or --adapter DIR");
    ExperimentStore store(p.has("--db") ? p.get("--db") : ExperimentStore::default_path());
    store.mark_crashed_runs();
    const auto run = store.find_run(p.positionals[0]);
    check(run.has_value(), "export: no run '" + p.positionals[0] + "' in " + store.path());
    const RunConfig cfg = run_config_from_yaml_string(run->config_yaml, ".");
    o.model_dir = p.has("--model") ? p.get("--model") : cfg.base_model;
    if (p.has("--checkpoint")) {
      o.adapter_dir = (fs::path(run->output_dir) / ("checkpoint-" + p.get("--checkpoint"))).string();
      check(fs::exists(o.adapter_dir), "export: run " + run->id + " has no checkpoint " + p.get("--checkpoint") +
                                           " (" + o.adapter_dir + ")");
    } else {
      // The output folder's adapter is the run's last word only when the run ended by itself (finished, or
      // stopped: written at that step). A run that crashed after a stop-and-resume has newer checkpoints
      // than that adapter.
      const bool has_adapter = fs::exists(fs::path(run->output_dir) / "adapter_model.safetensors");
      const bool ended = run->status == "finished" || run->status == "cancelled";
      const auto latest = ended && has_adapter ? std::nullopt : checkpoint_latest(run->output_dir);
      check(latest.has_value() || has_adapter,
            "export: run " + run->id + " has no adapter or checkpoint in " + run->output_dir);
      o.adapter_dir = latest ? *latest : run->output_dir;
    }
  }
  export_adapter(o);
  std::cout << (o.merged ? "merged checkpoint" : "PEFT adapter") << " written to " << o.out_dir << std::endl;
  return 0;
}

}  // namespace deltatune::cli
