// deltatune export RUN [--checkpoint N] --out DIR [--merged] [--class causal_lm|conditional_generation]
// deltatune export --adapter DIR [--model DIR] (--out DIR [--merged] | --merged OUT)
#include <iostream>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/export.h"
#include "deltatune/run_config.h"

namespace deltatune::cli {

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
    o.model_dir = p.has("--model") ? p.get("--model") : adapter_base_model_dir(o.adapter_dir);
  } else {
    check(p.positionals.size() == 1, "export: expected one RUN (id or name) or --adapter DIR");
    ExperimentStore store(p.has("--db") ? p.get("--db") : ExperimentStore::default_path());
    store.mark_crashed_runs();
    const auto run = store.find_run(p.positionals[0]);
    check(run.has_value(), "export: no run '" + p.positionals[0] + "' in " + store.path());
    const RunConfig cfg = run_config_from_yaml_string(run->config_yaml, ".");
    o.model_dir = p.has("--model") ? p.get("--model") : cfg.base_model;
    o.adapter_dir = run_export_adapter_dir(*run, p.has("--checkpoint") ? p.get("--checkpoint") : "");
  }
  export_adapter(o);
  std::cout << (o.merged ? "merged checkpoint" : "PEFT adapter") << " written to " << o.out_dir << std::endl;
  return 0;
}

}  // namespace deltatune::cli
