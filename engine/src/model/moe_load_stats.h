// Router load-balance statistics from the per-layer tokens-per-expert counts of a step
// (StepOutput::moe_load), reported as run metrics.
#pragma once
#include "core/tensor.h"

namespace deltatune {

struct MoeLoadStats {
  double max_ratio = -1;  // max over experts / mean over experts (1 = perfectly balanced); -1: no MoE data
  double cv = -1;         // coefficient of variation over experts: population std / mean (0 = balanced)
};

// load: host F32 [layers, E]. Each statistic is computed per layer and averaged over the layers that routed
// any token.
MoeLoadStats moe_load_stats(const Tensor& load);

}  // namespace deltatune
