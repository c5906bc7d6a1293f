// Trainer-side glue over the checkpoint folder format (train/checkpoint.h): what goes into a checkpoint
// and how a run is restored from one.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "lora/lora.h"
#include "model/config.h"

namespace deltatune {

struct TrainerState {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t micro_batch = 0;   // index of the next micro-batch within `epoch`
  int64_t tokens_seen = 0;
  double wall_seconds = 0;
  int64_t seed = 0;
  std::string run_id;
};

// Host F32 copy of the adapter's A/B (for export).
LoraAdapter lora_download(const LoraAdapter& adapter, Backend& be);

// Writes <output_dir>/checkpoint-<step>/ atomically (adapter + optimizer moments + state) and prunes to
// `keep` checkpoints. Returns the folder.
std::string checkpoint_save(const std::string& output_dir, const TrainerState& st, const LoraAdapter& adapter,
                            Backend& be, const ModelConfig& cfg, const std::string& class_prefix,
                            const std::string& base_model, int64_t keep);
// Newest complete checkpoint folder of output_dir, if any.
std::optional<std::string> checkpoint_find_latest(const std::string& output_dir);
// Loads A/B and moments into `adapter` (already on the backend) and returns the state.
TrainerState checkpoint_restore(const std::string& dir, LoraAdapter& adapter, Backend& be);

}  // namespace deltatune
