// PEFT LoRA adapter folders (adapter_config.json + adapter_model.safetensors) in and out. Layout:
// docs/peft-adapter.md.
#pragma once
#include <string>

#include "io/model_config.h"
#include "lora/lora.h"

namespace deltatune {

// Key prefix of the model class an adapter is for: "model.language_model." (…ForConditionalGeneration)
// or "model." (…ForCausalLM). `model_class` is "auto" (the class of the base checkpoint, whose keys start
// with `base_key_prefix`, ModelWeights::key_prefix), "causal_lm" or "conditional_generation".
std::string peft_class_prefix(const std::string& base_key_prefix, const std::string& model_class);

// Writes `adapter` (A/B as host F32 tensors or device tensors already downloaded by the caller) to `dir`
// atomically (temp folder + rename of each file). base_model_name goes to base_model_name_or_path.
void peft_adapter_write(const LoraAdapter& adapter, const ModelConfig& cfg, const std::string& class_prefix,
                        const std::string& base_model_name, const std::string& dir);

// Reads any PEFT LoRA adapter for this model (F32/BF16/F16, either class prefix, any key order,
// task_type null or CAUSAL_LM, any init_lora_weights). A/B come back as host F32 tensors. Throws Error
// naming the file and key when a module is not in the model, a shape does not fit, or the rank differs.
LoraAdapter peft_adapter_read(const std::string& dir, const ModelConfig& cfg);

}  // namespace deltatune
