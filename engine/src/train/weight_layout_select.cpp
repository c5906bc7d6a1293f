#include "train/weight_layout_select.h"

#include "core/bytes_text.h"
#include "core/error.h"
#include "deltatune/shard_plan.h"

namespace deltatune {

namespace {

ShardPlanSettings plan_settings(const RunConfig& cfg) {
  ShardPlanSettings s;
  s.lora_r = static_cast<int>(cfg.lora_r);
  s.lora_groups = cfg.lora_target_groups;
  s.tokens_per_step = cfg.micro_batch_size * cfg.sequence_len;
  s.fused_loss = cfg.fused_loss;
  // auto: the single-GPU plan checkpoints what the memory needs; the layout plan may count on it.
  s.gradient_checkpointing = cfg.gradient_checkpointing_auto || cfg.gradient_checkpointing;
  s.checkpoint_layers = cfg.gradient_checkpointing_auto ? -1 : cfg.gradient_checkpointing_layers;
  s.base_quantization = cfg.base_quantization;
  return s;
}

const LayoutEstimate& layout_of(const ShardPlan& p, WeightLayout l) {
  return p.layouts.at(static_cast<size_t>(l));
}

}  // namespace

WeightLayoutChoice choose_weight_layout(const RunConfig& cfg, const ModelInfo& info, int workers,
                                        int64_t gpu_memory_bytes) {
  WeightLayoutChoice c;
  const std::string& want = cfg.weight_layout;
  if (workers <= 1) {
    c.note = "weight_layout: replicated (one worker)";
    return c;
  }
  if (gpu_memory_bytes <= 0) {  // CPU workers: no device memory to plan for
    c.sharded = want == "sharded";
    c.note = std::string("weight_layout: ") + (c.sharded ? "sharded" : "replicated") + " (CPU workers: " +
             (want == "auto" ? "auto keeps every weight on every worker)" : "as configured)");
    return c;
  }
  const ShardPlan plan = plan_multi_gpu(info, plan_settings(cfg), GpuPool{workers, gpu_memory_bytes});
  const std::string text = shard_plan_text(plan);
  const LayoutEstimate& rep = layout_of(plan, WeightLayout::Replicated);
  const LayoutEstimate& sh = layout_of(plan, WeightLayout::Sharded);
  if (want == "replicated" || want == "sharded") {
    const LayoutEstimate& e = want == "sharded" ? sh : rep;
    check(e.fits, "weight_layout: " + want + " does not fit " + std::to_string(workers) + " GPUs:\n" + text +
                      (plan.choice() ? "(set weight_layout: auto for the plan's choice)" : ""));
    c.sharded = want == "sharded";
    c.note = "weight_layout: " + want + " (as configured; " + gib_text(e.total) + " of " +
             gib_text(gpu_memory_bytes) + " per GPU)";
    return c;
  }
  const LayoutEstimate* chosen = plan.choice();
  check(chosen != nullptr, "the model does not fit " + std::to_string(workers) + " GPUs in any weight layout:\n" + text);
  if (chosen->layout == WeightLayout::Replicated) {
    c.note = "weight_layout: auto: replicated (" + plan.reason + ")";
    return c;
  }
  if (chosen->layout == WeightLayout::Sharded) {
    c.sharded = true;
    c.note = "weight_layout: auto: sharded (" + plan.reason + ")";
    return c;
  }
  // The plan prefers expert parallel, which this build does not run yet: the next best layout that fits.
  if (rep.fits) {
    c.note = "weight_layout: auto: replicated (the plan's " + std::string(weight_layout_name(chosen->layout)) +
             " is not available yet; replicated fits)";
    return c;
  }
  check(sh.fits, "the model fits " + std::to_string(workers) + " GPUs only with " +
                     weight_layout_name(chosen->layout) +
                     ", which this build does not run yet (replicated and sharded do not fit):\n" + text);
  c.sharded = true;
  c.note = "weight_layout: auto: sharded (the plan's " + std::string(weight_layout_name(chosen->layout)) +
           " is not available yet; sharded fits)";
  return c;
}

}  // namespace deltatune
