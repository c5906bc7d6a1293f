// The merged full-checkpoint export: the base checkpoint with a LoRA adapter folded into its weights.
#pragma once
#include <functional>
#include <string>

#include "lora/lora.h"
#include "model/weights.h"

namespace deltatune {

// Writes the base checkpoint with the adapter merged as PEFT's merge_and_unload does (same key names,
// dtypes, sharding and extra files as the base). progress gets 0..1.
void merged_checkpoint_write(const ModelWeights& base, const LoraAdapter& adapter, const std::string& out_dir,
                             const std::function<void(double)>& progress = {});

}  // namespace deltatune
