// Export: a PEFT adapter folder or a merged full checkpoint, from a run or from an adapter folder.
#pragma once
#include <functional>
#include <string>

#include "deltatune/experiment_store.h"

namespace deltatune {

// Writes a PEFT adapter folder from a run checkpoint or adapter dir, or a merged full checkpoint.
struct ExportOptions {
  std::string model_dir;      // base checkpoint (for merged export and the key prefix)
  std::string adapter_dir;    // PEFT adapter to export/merge
  std::string out_dir;
  bool merged = false;
  std::string model_class = "auto";
  std::function<void(double)> progress;  // 0..1
};
void export_adapter(const ExportOptions& opts);

// The adapter a run exports: checkpoint-<checkpoint> of its output folder when `checkpoint` is set; else the output
// folder's adapter when the run ended by itself (finished, or cancelled: written at that step); else its
// newest checkpoint (a run that crashed after a stop-and-resume has checkpoints newer than that adapter).
// Throws deltatune::Error naming the run and folder when there is none.
std::string run_export_adapter_dir(const RunRecord& run, const std::string& checkpoint = "");

// base_model_name_or_path of the adapter folder `adapter_dir` when that is a local folder; throws
// deltatune::Error (pass the model folder explicitly) otherwise.
std::string adapter_base_model_dir(const std::string& adapter_dir);

}  // namespace deltatune
