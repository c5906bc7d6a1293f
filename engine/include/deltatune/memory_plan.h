// `gradient_checkpointing: auto`: the single-GPU memory plan. Given the model's shapes, the LoRA rank, the
// tokens of one micro-batch and the memory a GPU has free, it picks how many decoder layers (from the first)
// are checkpointed and how many rows of logits the fused loss computes at a time: the fastest setting whose
// estimated peak (estimate_vram) stays within the free memory less a margin.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deltatune/model_info.h"
#include "deltatune/recompute_keep.h"

namespace deltatune {

struct MemoryPlanRequest {
  int lora_r = 16;
  int64_t tokens_per_step = 4096;  // micro_batch_size * sequence_len
  bool fused_loss = true;
  LossLogits loss_logits = LossLogits::F32;  // the run config's loss_logits
  std::string base_quantization = "none";
  int64_t free_bytes = 0;          // the GPU's free memory before the run loads anything
  ImageLoad images;                // image rows: merged image tokens per micro-batch, vision LoRA
  std::vector<std::string> lora_groups;  // the run's lora_target_groups; empty: the default groups
  // The backend can keep checkpointed layers' inputs in page-locked host memory (RecomputeKeep::inputs_on_host:
  // the CUDA backend); the plan then also tries that, and takes it where it lowers the recompute.
  bool host_offload = false;
};

struct MemoryPlan {
  bool gradient_checkpointing = false;
  int64_t checkpoint_layers = 0;   // layers checkpointed, from the first (0 when gradient_checkpointing is off)
  int64_t loss_chunk_rows = 1024;
  LossLogits loss_logits = LossLogits::F32;  // the request's (memory_plan_text names bf16 logits)
  RecomputeKeep keep;              // what the checkpointed layers keep for their recompute (selective recompute)
  int64_t keep_bytes = 0;          // recompute_keep_bytes of `keep` (part of estimate.activations and .total)
  double recompute_cost = 0;       // recompute_cost of the plan
  // With bf16 logits: the extra cost of narrower loss chunks than the widest (more passes over the lm_head weight)
  // in recompute_cost's units, 0 for the widest. The planner's speed order is recompute_cost + loss_cost.
  double loss_cost = 0;
  int64_t free_bytes = 0;          // the request's
  int64_t budget_bytes = 0;        // free_bytes less the margin
  int64_t host_bytes = 0;          // page-locked host memory of keep.inputs_on_host (the stashed inputs)
  bool fits = false;               // false: even the least memory (most layers checkpointed, smallest chunk) exceeds
  VramEstimate estimate;           // the plan's predicted peak
};

// Kept free by the plan: max(1 GiB, 5% of the free memory) for fragmentation and what the estimate misses.
int64_t memory_plan_margin(int64_t free_bytes);

// Bytes a step keeps for selective recompute: `keep` applied to the first `checkpointed_layers` layers (-1: all)
// at `tokens` tokens (bf16 core outputs and kept GEMM outputs, fp32 attention logsumexp, the GDN core's backward
// scratch of the CUDA tensor-core path).
int64_t recompute_keep_bytes(const ModelInfo& info, int64_t tokens, int64_t checkpointed_layers,
                             const RecomputeKeep& keep);
// The recompute work of a setting, in GEMM FLOPs: the forward of every checkpointed layer (without the dense down
// projection, which the recompute skips) less what `keep` skips; the attention and GDN cores weighted by how much
// slower than the base GEMMs they run per FLOP on an H200 (an estimate, used only to order settings).
double recompute_cost(const ModelInfo& info, int64_t tokens, int64_t checkpointed_layers, const RecomputeKeep& keep);

// What the recompute of `checkpointed_layers` checkpointed layers keeps at the least recompute_cost within
// `room_bytes` of recompute_keep_bytes: the attention core or not (when one of those layers has attention), the MLP
// gate/up outputs on the first 0..N of them (dense models); ties: the fewer bytes. None when room_bytes < 0.
struct RecomputeKeepChoice {
  RecomputeKeep keep;
  int64_t bytes = 0;
  double cost = 0;
};
// mlp_host_every > 0 (keep.inputs_on_host): also tried with RecomputeKeep::mlp_host_every = that.
std::optional<RecomputeKeepChoice> cheapest_recompute_keep(const ModelInfo& info, int64_t tokens,
                                                           int64_t checkpointed_layers, int64_t room_bytes,
                                                           int64_t mlp_host_every = 0);
// RecomputeKeep::mlp_host_every: the smallest spacing k (>= 2) at which one layer's MLP gate/up (2·T·I bf16) and
// every layer's input go out during the forward at the copy stream's rate (40 GB/s) within the layers' forward GEMM
// time (at 700 TFLOP/s); 0 when even the inputs leave no room (and for MoE models).
int64_t mlp_host_spacing(const ModelInfo& info, int64_t tokens);
// How many checkpointed layers keep their MLP gate/up in host memory under `keep`.
int64_t mlp_host_layers(const ModelInfo& info, int64_t checkpointed_layers, const RecomputeKeep& keep);

// Tried: every count of checkpointed layers (from the first), each with and without the attention core kept and
// with the MLP gate/up outputs kept on its first 0..N checkpointed layers; the plan is the least recompute_cost
// whose estimate (estimate_vram + recompute_keep_bytes) fits (ties: the less memory). The GDN core is never kept by
// the plan (measured: less time saved per byte than checkpointing fewer layers; PERF_NOTES session 29). With
// request.host_offload each count is also tried with the inputs in host memory (keep.inputs_on_host), taken only
// where it lowers the recompute (or fits where the inputs on the device do not). Loss chunks: 1024 rows asked
// (see kLossChunkRows; the backend caps them: 384 rows of fp32 logits, 768 of bf16 at Qwen3.5's vocabulary); with
// bf16 logits each count is also tried with half the bf16 rows (384: half the memory, a slower loss: MemoryPlan::
// loss_cost), taken only where the recompute it saves outweighs that or where the wider chunks do not fit. Nothing
// fits: the least memory, nothing kept.
// Throws deltatune::Error when free_bytes <= 0.
MemoryPlan plan_memory(const ModelInfo& info, const MemoryPlanRequest& request);

// One line: "layers 0-7 of 32 checkpointed, loss chunks of 1024 rows: expected peak 21.3 GiB within ...", with what
// the recompute keeps when it keeps anything ("kept for the recompute: attention core, MLP gate/up of layers 0-7").
std::string recompute_keep_text(const ModelInfo& info, const RecomputeKeep& keep, int64_t checkpointed_layers);
// One line: "checkpointing layers 0-7 of 32, loss chunks of 1024 rows: expected peak 21.3 GiB of 75.0 GiB".
std::string memory_plan_text(const ModelInfo& info, const MemoryPlan& plan);

}  // namespace deltatune
