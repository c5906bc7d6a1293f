// The single-GPU memory plan behind `gradient_checkpointing: auto` (see deltatune/memory_plan.h).
#include "deltatune/memory_plan.h"

#include <algorithm>

#include "core/bytes_text.h"
#include "deltatune/error.h"

namespace deltatune {

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// The loss is chunked by the engine's 1024 rows only: smaller chunks were measured not to lower the step's peak
// (H200, 2b and 9b shapes at 4096 tokens: 256 rows gave the same peak as 1024; the peak is in the backward, not
// in the loss), so planning with them would only under-predict.
constexpr int64_t kLossChunkRows = 1024;

}  // namespace

int64_t memory_plan_margin(int64_t free_bytes) { return std::max<int64_t>(kGiB, free_bytes / 20); }

MemoryPlan plan_memory(const ModelInfo& info, const MemoryPlanRequest& req) {
  check(req.free_bytes > 0, "memory plan: the GPU's free memory is unknown (" + std::to_string(req.free_bytes) +
                                " bytes); set gradient_checkpointing to true, false or a number of layers");
  MemoryPlan plan;
  plan.free_bytes = req.free_bytes;
  plan.budget_bytes = req.free_bytes - memory_plan_margin(req.free_bytes);
  // Checkpointing the last layer saves nothing (its backward recomputes it at once) yet the estimate counts
  // its input too, so all L layers use more memory than L-1: the fallback is the least memory tried, not L.
  MemoryPlan least;
  const int64_t L = info.num_layers;
  for (int64_t n = 0; n <= L; ++n) {
    const VramEstimate e = estimate_vram(info, req.lora_r, req.tokens_per_step, req.fused_loss, n > 0, n,
                                         req.base_quantization, kLossChunkRows, req.images,
                                         req.lora_groups);
    plan.gradient_checkpointing = n > 0;
    plan.checkpoint_layers = n;
    plan.loss_chunk_rows = kLossChunkRows;
    plan.estimate = e;
    if (e.total <= plan.budget_bytes) {
      plan.fits = true;
      return plan;
    }
    if (least.estimate.total == 0 || e.total < least.estimate.total) least = plan;
  }
  return least;  // nothing fits: the least memory there is
}

std::string memory_plan_text(const ModelInfo& info, const MemoryPlan& p) {
  std::string s = !p.gradient_checkpointing ? "no layers checkpointed"
                  : p.checkpoint_layers >= info.num_layers
                      ? "all " + std::to_string(info.num_layers) + " layers checkpointed"
                      : "layers 0-" + std::to_string(p.checkpoint_layers - 1) + " of " +
                            std::to_string(info.num_layers) + " checkpointed";
  s += ", loss chunks of " + std::to_string(p.loss_chunk_rows) + " rows: expected peak " + gib_text(p.estimate.total) +
       (p.fits ? " within " : " EXCEEDS ") + gib_text(p.budget_bytes) + " (" + gib_text(p.free_bytes) + " free less a " +
       gib_text(memory_plan_margin(p.free_bytes)) + " margin)";
  return s;
}

}  // namespace deltatune
