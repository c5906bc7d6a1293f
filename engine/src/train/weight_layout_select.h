// Which weight layout a multi-worker run uses (RunConfig::weight_layout; the layouts and the memory plan are in
// deltatune/shard_plan.h): replicated frozen weights (plain data parallel) or sharded (ZeRO-3 style), refusing
// before the model is loaded when the plan says nothing fits.
#pragma once
#include <cstdint>
#include <string>

#include "deltatune/model_info.h"
#include "deltatune/run_config.h"

namespace deltatune {

struct WeightLayoutChoice {
  bool sharded = false;
  std::string note;  // one log line: the layout and why
};

// `workers` ranks, each on a GPU of `gpu_memory_bytes` (the smallest of the job's; 0 = CPU workers).
// Expert parallel (the plan's choice when it moves fewer bytes) is not built yet: the plan's sharded layout is
// taken in its place when it fits. Throws Error with the plan's text (what would fit) when nothing fits, or
// when weight_layout asks for a layout the plan says does not fit.
WeightLayoutChoice choose_weight_layout(const RunConfig& cfg, const ModelInfo& info, int workers,
                                        int64_t gpu_memory_bytes);

}  // namespace deltatune
