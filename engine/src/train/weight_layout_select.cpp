#include "train/weight_layout_select.h"

#include <optional>

#include "core/bytes_text.h"
#include "core/error.h"
#include "deltatune/shard_plan.h"

namespace deltatune {

namespace {

ShardPlanSettings plan_settings(const RunConfig& cfg, const ImageLoad& images) {
  ShardPlanSettings s;
  s.images = images;
  s.lora_r = static_cast<int>(cfg.lora_r);
  s.lora_groups = cfg.lora_target_groups;
  s.tokens_per_step = cfg.micro_batch_size * cfg.sequence_len;
  s.fused_loss = cfg.fused_loss;
  s.loss_logits = loss_logits_from_name(cfg.loss_logits, "loss_logits");
  s.gradient_checkpointing = cfg.gradient_checkpointing;
  s.checkpoint_layers = cfg.gradient_checkpointing_layers;
  s.base_quantization = cfg.base_quantization;
  return s;
}

// The layout RunConfig::weight_layout names; none for "auto" or an unknown name.
std::optional<WeightLayout> layout_named(const std::string& name) {
  for (int l = 0; l < 4; ++l)
    if (name == weight_layout_name(static_cast<WeightLayout>(l))) return static_cast<WeightLayout>(l);
  return std::nullopt;
}

}  // namespace

WeightLayoutChoice choose_weight_layout(const RunConfig& cfg, const ModelInfo& info, int workers,
                                        int64_t gpu_memory_bytes, const ImageLoad& images) {
  WeightLayoutChoice c;
  const std::string& want = cfg.weight_layout;
  auto take = [&](WeightLayout l) {
    c.sharded = l == WeightLayout::Sharded || l == WeightLayout::ExpertParallelSharded;
    c.expert_parallel = l == WeightLayout::ExpertParallel || l == WeightLayout::ExpertParallelSharded;
  };
  if (workers <= 1) {
    c.note = "weight_layout: replicated (one worker)";
    return c;
  }
  if (gpu_memory_bytes <= 0) {  // CPU workers: no device memory to plan for
    if (const std::optional<WeightLayout> l = layout_named(want)) take(*l);
    check(!c.expert_parallel || (info.num_experts > 0 && info.num_experts % workers == 0),
          "weight_layout: " + want + " needs a MoE model whose experts divide over the " + std::to_string(workers) +
              " workers");
    c.note = "weight_layout: " + (want == "auto" ? std::string("replicated") : want) + " (CPU workers: " +
             (want == "auto" ? "auto keeps every weight on every worker)" : "as configured)");
    return c;
  }
  const GpuPool gpus{workers, gpu_memory_bytes};
  if (cfg.gradient_checkpointing_auto) {
    const std::optional<WeightLayout> fixed = layout_named(want);
    check(want == "auto" || fixed, "weight_layout: unknown layout '" + want + "'");
    const ShardPlan plan = plan_multi_gpu_auto_checkpointing(info, plan_settings(cfg, images), gpus, fixed ? &*fixed : nullptr);
    if (fixed) {
      const LayoutEstimate& e = plan.layouts[static_cast<size_t>(*fixed)];
      check(e.applicable, "weight_layout: " + want + " does not apply: " + e.not_applicable);
    }
    const LayoutEstimate* chosen = plan.choice();
    check(chosen != nullptr, (fixed ? "weight_layout: " + want + " does not fit " : std::string("the model does not fit ")) +
                                 std::to_string(workers) + " GPUs" + (fixed ? "" : " in any weight layout") +
                                 " with any gradient checkpointing:\n" + shard_plan_text(plan));
    take(chosen->layout);
    c.checkpoint_layers = plan.settings.gradient_checkpointing ? plan.settings.checkpoint_layers : 0;
    c.keep = plan.settings.gradient_checkpointing ? plan.settings.keep : RecomputeKeep{};
    c.note = "weight_layout: " + std::string(fixed ? "" : "auto: ") + weight_layout_name(chosen->layout) + " (" +
             plan.reason + "; gradient_checkpointing: auto, expected peak " + gib_text(chosen->total) + " of " +
             gib_text(gpu_memory_bytes) + " free per GPU)";
    return c;
  }
  const ShardPlan plan = plan_multi_gpu(info, plan_settings(cfg, images), gpus);
  const std::string text = shard_plan_text(plan);
  if (want != "auto") {
    for (const LayoutEstimate& e : plan.layouts) {
      if (want != weight_layout_name(e.layout)) continue;
      check(e.applicable, "weight_layout: " + want + " does not apply: " + e.not_applicable);
      check(e.fits, "weight_layout: " + want + " does not fit " + std::to_string(workers) + " GPUs:\n" + text +
                        (plan.choice() ? "(set weight_layout: auto for the plan's choice)" : ""));
      take(e.layout);
      c.note = "weight_layout: " + want + " (as configured; " + gib_text(e.total) + " of " +
               gib_text(gpu_memory_bytes) + " per GPU)";
      return c;
    }
    throw Error("weight_layout: unknown layout '" + want + "'");
  }
  const LayoutEstimate* chosen = plan.choice();
  check(chosen != nullptr, "the model does not fit " + std::to_string(workers) + " GPUs in any weight layout:\n" + text);
  take(chosen->layout);
  c.note = "weight_layout: auto: " + std::string(weight_layout_name(chosen->layout)) + " (" + plan.reason + ")";
  return c;
}

}  // namespace deltatune
