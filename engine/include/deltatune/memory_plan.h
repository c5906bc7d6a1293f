// `gradient_checkpointing: auto`: the single-GPU memory plan. Given the model's shapes, the LoRA rank, the
// tokens of one micro-batch and the memory a GPU has free, it picks how many decoder layers (from the first)
// are checkpointed and how many rows of logits the fused loss computes at a time: the fastest setting whose
// estimated peak (estimate_vram) stays within the free memory less a margin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deltatune/model_info.h"

namespace deltatune {

struct MemoryPlanRequest {
  int lora_r = 16;
  int64_t tokens_per_step = 4096;  // micro_batch_size * sequence_len
  bool fused_loss = true;
  std::string base_quantization = "none";
  int64_t free_bytes = 0;          // the GPU's free memory before the run loads anything
  ImageLoad images;                // image rows: merged image tokens per micro-batch, vision LoRA
  std::vector<std::string> lora_groups;  // the run's lora_target_groups; empty: the default groups
};

struct MemoryPlan {
  bool gradient_checkpointing = false;
  int64_t checkpoint_layers = 0;   // layers checkpointed, from the first (0 when gradient_checkpointing is off)
  int64_t loss_chunk_rows = 1024;
  int64_t free_bytes = 0;          // the request's
  int64_t budget_bytes = 0;        // free_bytes less the margin
  bool fits = false;               // false: even the least memory (most layers checkpointed, smallest chunk) exceeds
  VramEstimate estimate;           // the plan's predicted peak
};

// Kept free by the plan: max(1 GiB, 5% of the free memory) for fragmentation and what the estimate misses.
int64_t memory_plan_margin(int64_t free_bytes);

// Order tried: fewest checkpointed layers first (each one costs a recompute of its forward), and for each the
// loss chunks from the largest (today only 1024 rows: see kLossChunks); the first that fits is the plan.
// Throws deltatune::Error when free_bytes <= 0.
MemoryPlan plan_memory(const ModelInfo& info, const MemoryPlanRequest& request);

// One line: "checkpointing layers 0-7 of 32, loss chunks of 1024 rows: expected peak 21.3 GiB of 75.0 GiB".
std::string memory_plan_text(const ModelInfo& info, const MemoryPlan& plan);

}  // namespace deltatune
