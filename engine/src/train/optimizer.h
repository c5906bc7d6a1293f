// Optimizer over the LoRA weights: global grad norm, clipping, AdamW or SGD.
#pragma once
#include <string>

#include "backend/backend.h"
#include "lora/lora.h"

namespace deltatune {

struct OptimizerSettings {
  std::string kind = "adamw_torch";  // adamw_torch | adamw | sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double max_grad_norm = 1.0;        // <= 0: no clipping
};

// √(Σ over every LoRA gradient of g²).
double lora_grad_norm(LoraAdapter& adapter, Backend& be);
// True when every gradient is finite.
bool lora_grads_finite(LoraAdapter& adapter, Backend& be);
// Clips by global norm (torch clip_grad_norm_ semantics) and applies one step with learning rate lr.
// `step` is the 1-based optimizer step (Adam bias correction). Allocates moments on first use.
void optimizer_step(LoraAdapter& adapter, Backend& be, const OptimizerSettings& s, double lr, int64_t step,
                    double grad_norm);

}  // namespace deltatune
