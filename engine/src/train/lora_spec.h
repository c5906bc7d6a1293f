// The LoRA settings of a run (lora_r, lora_alpha, lora_target_*) as the adapter factory takes them.
#pragma once
#include "deltatune/run_config.h"
#include "lora/lora.h"

namespace deltatune {

// Groups, modules and parameters all empty in the run config = the default groups (resolved by lora_create,
// because only it knows the model: lora_default_groups).
LoraSpec lora_spec_from_run_config(const RunConfig& cfg);

}  // namespace deltatune
