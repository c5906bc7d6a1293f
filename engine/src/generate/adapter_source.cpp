// Adapter folder or run id/name -> the adapter folder to load (deltatune::resolve_adapter).
#include <filesystem>

#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "generate/adapter_source.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace deltatune {

std::string resolve_adapter_folder(const std::string& adapter, const std::string& db_path) {
  check(!adapter.empty(), "internal: empty adapter name");
  if (fs::is_directory(adapter)) {
    check(fs::exists(fs::path(adapter) / "adapter_config.json") &&
              fs::exists(fs::path(adapter) / "adapter_model.safetensors"),
          adapter + ": not a PEFT adapter folder (expected adapter_config.json and adapter_model.safetensors)");
    return adapter;
  }
  const std::string db = db_path.empty() ? ExperimentStore::default_path() : db_path;
  check(fs::exists(db), "no adapter folder '" + adapter + "' (and no experiment database at " + db +
                            " to look it up as a run)");
  ExperimentStore store(db);
  const auto run = store.find_run(adapter);
  check(run.has_value(), "no adapter folder and no run '" + adapter + "' in " + db);
  // A run that ended by itself wrote its final adapter into its output folder; otherwise the newest checkpoint
  // is its latest word (as `deltatune export` decides).
  const bool has_final = fs::exists(fs::path(run->output_dir) / "adapter_model.safetensors");
  const bool ended = run->status == "finished" || run->status == "cancelled";
  if (ended && has_final) return run->output_dir;
  const auto latest = checkpoint_latest(run->output_dir);
  if (latest) return *latest;
  check(has_final, "run " + run->id + " (" + run->status + ") has no checkpoint yet in " + run->output_dir +
                       ": nothing to generate with until it saves one");
  return run->output_dir;
}

}  // namespace deltatune
