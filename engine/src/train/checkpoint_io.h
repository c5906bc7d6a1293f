// Trainer-side glue over the checkpoint folder format (train/checkpoint.h): the adapter (PEFT files),
// the AdamW moments of every LoRA tensor, and the TrainerState.
#pragma once
#include <string>

#include "backend/backend.h"
#include "lora/lora.h"
#include "io/model_config.h"
#include "train/checkpoint.h"

namespace deltatune {

// Host F32 copy of the adapter's A/B in PEFT's layout (for export), and its AdamW moments with_moments (for a
// checkpoint).
LoraAdapter lora_download(const LoraAdapter& adapter, Backend& be, bool with_moments = false);

// Writes <output_dir>/checkpoint-<step>/ atomically and prunes to `keep`. Returns the folder.
std::string checkpoint_save(const std::string& output_dir, const TrainerState& st, const LoraAdapter& adapter,
                            Backend& be, const ModelConfig& cfg, const std::string& class_prefix,
                            const std::string& base_model, int64_t keep);

// The same from a host adapter (F32 A, B and the moments where defined), e.g. expert parallel's joined slices.
std::string checkpoint_save_host(const std::string& output_dir, const TrainerState& st, const LoraAdapter& host,
                                 const ModelConfig& cfg, const std::string& class_prefix,
                                 const std::string& base_model, int64_t keep);

// Loads A/B and the moments of checkpoint `dir` into `adapter` (already on the backend); returns the state.
// Throws Error if the checkpoint's adapter does not match the run's adapter.
TrainerState checkpoint_restore(const std::string& dir, LoraAdapter& adapter, Backend& be, const ModelConfig& cfg);
// The same into an adapter still on the host (F32 copies; expert parallel restores there, then each worker gets
// its experts' slice before anything reaches a GPU).
TrainerState checkpoint_restore_host(const std::string& dir, LoraAdapter& host, const ModelConfig& cfg);

}  // namespace deltatune
