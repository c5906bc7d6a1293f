// export_adapter: a PEFT adapter folder for the chosen model class, or a merged full checkpoint.
#include <filesystem>

#include "core/error.h"
#include "deltatune/trainer.h"
#include "lora/peft_io.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace deltatune {

void export_adapter(const ExportOptions& opts) {
  check(!opts.model_dir.empty(), "export: the base model folder is not known (pass --model DIR)");
  check(!opts.adapter_dir.empty(), "export: no adapter folder given");
  check(!opts.out_dir.empty(), "export: no output folder given (--out DIR)");
  check(fs::exists(fs::path(opts.adapter_dir) / "adapter_model.safetensors"),
        opts.adapter_dir + ": no adapter_model.safetensors (expected a PEFT adapter folder)");
  check(fs::weakly_canonical(opts.out_dir) != fs::weakly_canonical(opts.adapter_dir),
        "export: --out must differ from the adapter folder");
  if (opts.progress) opts.progress(0.0);
  const ModelWeights base = model_weights_load(opts.model_dir);
  const LoraAdapter adapter = peft_adapter_read(opts.adapter_dir, base.config);
  if (opts.merged) {
    merged_checkpoint_write(base, adapter, opts.out_dir, opts.progress);
  } else {
    peft_adapter_write(adapter, base.config, peft_class_prefix(base, opts.model_class), opts.model_dir, opts.out_dir);
  }
  if (opts.progress) opts.progress(1.0);
}

}  // namespace deltatune
