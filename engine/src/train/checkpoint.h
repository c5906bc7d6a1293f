// Training checkpoints: `<output_dir>/checkpoint-<step>/` holding
//   adapter_model.safetensors + adapter_config.json   the PEFT adapter (written by a callback)
//   optimizer.safetensors                              optimizer moments (host F32), metadata step
//   trainer_state.json                                 step, data position, RNG, schedule, tokens, run id
// A checkpoint folder exists under its final name only when complete: everything is built in
// `checkpoint-<step>.tmp-<pid>/`, every file and the folder fsync'ed, then renamed, then the parent
// fsync'ed. A kill at any moment leaves either the old set of checkpoints or the new one, plus at most a
// stale *.tmp-* folder that checkpoint_latest removes.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace deltatune {

class SafetensorsFile;

struct TrainerState {
  int64_t step = 0;  // optimizer steps done (the checkpoint's number)
  int64_t total_steps = 0;
  double epoch = 0;  // fractional epochs done, for display
  // Data position: the next micro-batch to train is micro_batch_index of epoch epoch_index (0-based).
  int64_t epoch_index = 0;
  int64_t micro_batch_index = 0;
  int64_t seed = 0;
  std::string rng_state;       // the trainer's RNG state, opaque text ("" = derived from seed and step)
  int64_t scheduler_step = 0;  // LR scheduler position (steps taken)
  double lr = 0;               // rate of the last step, for display
  int64_t tokens_seen = 0;
  int64_t trained_tokens = 0;
  double wall_seconds = 0;  // training time so far, so a resumed run keeps counting
  double best_eval_loss = -1;
  std::string run_id;
  std::string config_hash;                   // run_config_hash of the run's config
  std::map<std::string, std::string> extra;  // anything else the trainer wants back on resume
  friend bool operator==(const TrainerState&, const TrainerState&) = default;
};

// Writes the PEFT adapter (adapter_model.safetensors + adapter_config.json) into the given folder, e.g.
// [&](const std::string& dir) { peft_adapter_write(adapter, cfg, prefix, base_name, dir); }.
using AdapterWriter = std::function<void(const std::string& dir)>;

// Writes checkpoint-<state.step> under output_dir (created if missing) and returns its path. `optimizer`
// are host tensors (moments, e.g. "<lora tensor>.exp_avg" / ".exp_avg_sq"; empty for SGD). A checkpoint of
// the same step is replaced atomically. Then prunes to save_total_limit (<= 0 keeps all): the new one is
// always kept, checkpoints with a larger step (an abandoned timeline after resuming from an older one)
// are removed, and of the rest the newest save_total_limit - 1 stay. Throws Error naming the path (disk
// full, read-only folder); nothing existing is touched before the new checkpoint is complete.
std::string checkpoint_write(const std::string& output_dir, const TrainerState& state,
                             const std::vector<std::pair<std::string, Tensor>>& optimizer,
                             const AdapterWriter& write_adapter, int64_t save_total_limit);

struct Checkpoint {
  std::string dir;
  TrainerState state;
  std::shared_ptr<SafetensorsFile> optimizer;      // moments, memory-mapped: optimizer->get(name)
  std::string adapter_dir() const { return dir; }  // for peft_adapter_read(dir, cfg)
};

// Opens and validates a checkpoint folder: every file present, trainer_state.json complete, the
// safetensors files valid, steps consistent. Throws Error naming the folder and what is wrong.
Checkpoint checkpoint_load(const std::string& dir);

// Complete checkpoint folders of output_dir (final names only), ascending by step.
std::vector<std::pair<int64_t, std::string>> checkpoint_list(const std::string& output_dir);

// The newest checkpoint that loads, or nullopt. Removes *.tmp-<pid> folders of processes that are gone.
std::optional<std::string> checkpoint_latest(const std::string& output_dir);

// The step of a "checkpoint-<step>" folder name, or -1.
int64_t checkpoint_step_of(const std::string& folder_name);

// What a training run wrote in `dir` that a new run or an export there would overwrite, for the message that
// refuses it ("checkpoint-2, checkpoint-4", "trainer_state.json"); "" when nothing. A folder is a run's output
// when it holds checkpoint-<step> folders, or is itself a checkpoint (trainer_state.json,
// optimizer.safetensors); `with_adapter` counts its final adapter_model.safetensors too (an export may replace
// an earlier export's adapter, a new run may not replace a run's).
std::string run_files_in(const std::string& dir, bool with_adapter);

}  // namespace deltatune
