// Which weight layout a multi-worker run uses (RunConfig::weight_layout; the layouts and the memory plan are in
// deltatune/shard_plan.h): replicated frozen weights (plain data parallel) or sharded (ZeRO-3 style), refusing
// before the model is loaded when the plan says nothing fits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "deltatune/model_info.h"
#include "deltatune/recompute_keep.h"
#include "deltatune/run_config.h"

namespace deltatune {

struct WeightLayoutChoice {
  bool sharded = false;          // the frozen (non-expert, under expert parallel) layer weights split 1/N
  bool expert_parallel = false;  // the MoE experts split E/N, tokens exchanged (model/expert_parallel.h)
  std::string note;              // one log line: the layout and why
  // gradient_checkpointing: auto on GPUs: the checkpointed layers planned with the layout (per GPU, for its memory
  // less the plan's margin); unset otherwise (the run's own setting, or the CPU plan).
  std::optional<int64_t> checkpoint_layers;
  RecomputeKeep keep;  // with checkpoint_layers: what those layers keep for their recompute
};

// `workers` ranks, each on a GPU of `gpu_memory_bytes` (the smallest of the job's; 0 = CPU workers; with
// gradient_checkpointing: auto the free memory, else the total). With auto the layout and the checkpointed layers
// are planned together (plan_multi_gpu_auto_checkpointing).
// auto takes the plan's choice (deltatune/shard_plan.h: the first that fits of replicated, expert_parallel,
// sharded, expert_parallel_sharded, an order measured). Throws Error with the plan's text (what would
// fit) when nothing fits, or when weight_layout asks for a layout the plan says does not fit or does not apply
// (expert parallel of a dense model). `images`: the data's most image tokens in one micro-batch (each GPU runs
// the vision tower on its own).
WeightLayoutChoice choose_weight_layout(const RunConfig& cfg, const ModelInfo& info, int workers,
                                        int64_t gpu_memory_bytes, const ImageLoad& images = {});

}  // namespace deltatune
