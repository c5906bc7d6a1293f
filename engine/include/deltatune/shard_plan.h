// The memory plan for training on N GPUs: which weight layout fits each GPU, and which of those is chosen.
//
// Layouts (per GPU; every layout keeps the LoRA weights + optimizer state of what it trains and sums the LoRA
// gradients over the GPUs as data parallel does):
//   replicated               every GPU holds all frozen weights (plain data parallel)
//   sharded                  frozen weights split 1/N per GPU (ZeRO-3 / FSDP style); a layer's weights are
//                            all-gathered before its forward and its backward, the next one prefetched, so
//                            two gathered units are in flight at a time
//   expert_parallel          MoE only: each GPU holds E/N experts of every layer (and their LoRA), the other
//                            frozen weights replicated; tokens travel to their experts' GPU by all-to-all
//   expert_parallel_sharded  MoE only: experts as expert_parallel, the other frozen weights sharded
// Of the layouts that fit, the plan takes the first in this order: replicated, expert_parallel, sharded,
// expert_parallel_sharded (measured: expert parallel beats sharded on NVLink GPUs at 35B-A3B and 122B-A10B,
// dist/shard_plan.cpp says by how much); moved_per_micro_batch (weight gathers vs token exchange) is reported for
// each. (The enum below is the display order.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deltatune/model_info.h"
#include "deltatune/recompute_keep.h"

namespace deltatune {

struct ShardPlanSettings {
  int lora_r = 16;
  std::vector<std::string> lora_groups;  // empty: the default groups (every group but experts)
  int64_t tokens_per_step = 4096;        // per GPU: micro_batch_size * sequence_len
  bool fused_loss = true;
  LossLogits loss_logits = LossLogits::F32;  // RunConfig::loss_logits
  bool gradient_checkpointing = false;
  int64_t checkpoint_layers = -1;        // RunConfig::gradient_checkpointing_layers
  // With gradient_checkpointing: what the checkpointed layers keep for their recompute (its bytes are counted in
  // the activations; plan_multi_gpu_auto_checkpointing plans it).
  RecomputeKeep keep;
  std::string base_quantization = "none";  // none | fp8 | nf4
  int64_t margin_bytes = 0;  // kept free on each GPU (the auto checkpointing plan keeps memory_plan_margin)
  ImageLoad images;          // image rows: every GPU runs the vision tower on its own micro-batch's images
};

struct GpuPool {
  int count = 1;
  int64_t memory_bytes = 0;  // of each GPU (the smallest when they differ)
};

enum class WeightLayout { Replicated, Sharded, ExpertParallel, ExpertParallelSharded };
const char* weight_layout_name(WeightLayout layout);

struct LayoutEstimate {
  WeightLayout layout = WeightLayout::Replicated;
  bool applicable = false;
  std::string not_applicable;  // why not (dense model, one GPU, experts not divisible by the GPUs)
  // Bytes per GPU.
  int64_t frozen_resident = 0;     // frozen weights kept on the GPU (+ dequantization scratch of a quantized base)
  int64_t gathered_in_flight = 0;  // sharded: the two largest consecutive gathered units
  int64_t lora_and_optimizer = 0;  // fp32 LoRA weight, gradient, Adam m and v of what this GPU trains
  int64_t activations = 0, logits = 0, overhead = 0;
  int64_t backend_buffers = 0;     // the backend's own buffers (estimate_vram's)
  int64_t exchange_buffers = 0;    // expert parallel: tokens received for this GPU's experts, and sent back
  int64_t vision = 0;              // image rows: the vision tower's weights (on every GPU) and activations
  // Expert parallel: the GPU's peak while the adapter is set up (its own adapter, expert LoRA sliced on the host,
  // with the dense gradients twice while they move to the summed buffer; shard_plan.cpp). 0 for the other
  // layouts. total is the larger of this plus the overhead and the training step's sum.
  int64_t adapter_setup = 0;
  int64_t total = 0;
  int64_t moved_per_micro_batch = 0;  // bytes this GPU receives per micro-batch (gathers, token exchange)
  bool fits = false;
};

struct ShardPlan {
  GpuPool gpus;
  ShardPlanSettings settings;
  std::vector<std::string> lora_groups;  // the groups counted (settings' or the default)
  std::vector<LayoutEstimate> layouts;   // every layout, in WeightLayout order
  int chosen = -1;                       // index into layouts; -1: nothing fits
  std::string reason;                    // why the chosen layout (or what the refusal says)
  std::string keep_text;                 // what checkpointed layers keep for their recompute (recompute_keep_text)
  // When nothing fits: each change on its own that would fit ("LoRA rank 8 instead of 16", "3 GPUs of ...").
  std::vector<std::string> would_fit;
  const LayoutEstimate* choice() const { return chosen < 0 ? nullptr : &layouts[static_cast<size_t>(chosen)]; }
};

// Throws Error naming the setting when it is invalid (count < 1, no memory, an unknown LoRA group).
ShardPlan plan_multi_gpu(const ModelInfo& info, const ShardPlanSettings& settings, const GpuPool& gpus);

// gradient_checkpointing: auto on several GPUs: for each layout in the plan's order (replicated, expert_parallel,
// sharded, expert_parallel_sharded; only `layout` when given), the checkpointed layers (from the first) and what they
// keep for their recompute with the least recompute_cost (deltatune/memory_plan.h, as the one-GPU plan) whose
// per-GPU estimate fits each GPU's memory less memory_plan_margin; the first layout that fits with some setting is
// the plan, its settings holding that setting. The layout order comes first because the measured gap between
// layouts is larger than that of checkpointing (122B-A10B on 4 H200s: expert parallel with every layer checkpointed
// 10,029 tok/s vs sharded with half of them 9,235). settings' checkpointing fields are ignored. Nothing fits: the
// plan with every layer checkpointed (its refusal says what would fit).
ShardPlan plan_multi_gpu_auto_checkpointing(const ModelInfo& info, ShardPlanSettings settings, const GpuPool& gpus,
                                            const WeightLayout* layout = nullptr);

// Several lines: each layout's per-GPU memory and whether it fits, then the choice or the refusal with what
// would fit.
std::string shard_plan_text(const ShardPlan& plan);

// "80GiB", "80 GB", "141GiB", "81920MiB", "85899345920" (bytes) -> bytes. GB/MB are powers of ten, GiB/MiB of
// two. Throws Error naming the text.
int64_t parse_memory_size(const std::string& text);

}  // namespace deltatune
