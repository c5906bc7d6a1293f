#include "train/lora_spec.h"

namespace deltatune {

LoraSpec lora_spec_from_run_config(const RunConfig& cfg) {
  LoraSpec s;
  s.r = cfg.lora_r;
  s.alpha = cfg.lora_alpha;
  s.dropout = cfg.lora_dropout;
  s.rslora = cfg.use_rslora;
  s.groups = cfg.lora_target_groups;
  s.modules = cfg.lora_target_modules;
  s.parameters = cfg.lora_target_parameters;
  return s;
}

}  // namespace deltatune
