// Which weight layout a multi-worker run takes (train/weight_layout_select.h) on the published Qwen3.5 shapes:
// the plan's choice (expert parallel included), explicit layouts checked against
// the plan, and a refusal that carries the plan's text with what would fit.
#include <gtest/gtest.h>

#include <string>

#include "deltatune/error.h"
#include "deltatune/memory_plan.h"
#include "deltatune/shard_plan.h"
#include "error_text.h"
#include "train/weight_layout_select.h"

namespace deltatune {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

ModelInfo published(const std::string& name) {
  return model_info_from_config(std::string(DT_SOURCE_DIR) + "/tests/fixtures/published_configs/" + name + ".json");
}

const LayoutEstimate& layout_estimate(const ShardPlan& p, WeightLayout l) { return p.layouts[static_cast<size_t>(l)]; }

RunConfig run(const ModelInfo& info, std::vector<std::string> groups) {
  RunConfig c;
  c.lora_r = 16;
  c.lora_target_groups = std::move(groups);
  c.micro_batch_size = 1;
  c.sequence_len = 4096;
  return c;
}

TEST(WeightLayout, MoeWithExpertLoraIsSplitOverTwoEightyGigabyteGpus) {
  const ModelInfo info = published("qwen3_5_35b_a3b");
  const RunConfig cfg = run(info, info.lora_groups);
  ShardPlanSettings s;
  s.lora_r = 16;
  s.lora_groups = info.lora_groups;
  s.gradient_checkpointing = true;
  const ShardPlan plan = plan_multi_gpu(info, s, {2, 80 * kGiB});
  ASSERT_NE(plan.choice(), nullptr);
  const bool replicated_fits = plan.layouts[static_cast<size_t>(WeightLayout::Replicated)].fits;
  ASSERT_FALSE(replicated_fits);
  const WeightLayoutChoice c = choose_weight_layout(cfg, info, 2, 80 * kGiB);
  // The plan's own choice, said in the note.
  const WeightLayout l = plan.choice()->layout;
  EXPECT_EQ(c.sharded, l == WeightLayout::Sharded || l == WeightLayout::ExpertParallelSharded) << c.note;
  EXPECT_EQ(c.expert_parallel, l == WeightLayout::ExpertParallel || l == WeightLayout::ExpertParallelSharded)
      << c.note;
  EXPECT_NE(c.note.find(std::string("auto: ") + weight_layout_name(l) + " ("), std::string::npos) << c.note;
  EXPECT_TRUE(c.sharded || c.expert_parallel) << c.note;
}

TEST(WeightLayout, ExpertParallelAsConfigured) {
  const ModelInfo moe = published("qwen3_5_35b_a3b");
  RunConfig cfg = run(moe, moe.lora_groups);
  cfg.weight_layout = "expert_parallel_sharded";
  const WeightLayoutChoice c = choose_weight_layout(cfg, moe, 2, 80 * kGiB);
  EXPECT_TRUE(c.sharded && c.expert_parallel) << c.note;
  cfg.weight_layout = "expert_parallel";
  EXPECT_TRUE(choose_weight_layout(cfg, moe, 2, 0).expert_parallel);  // CPU workers: as configured
  const ModelInfo dense = published("qwen3_5_27b");
  RunConfig dcfg = run(dense, {"attn"});
  dcfg.weight_layout = "expert_parallel";
  const std::string e = error_of([&] { choose_weight_layout(dcfg, dense, 2, 141 * kGiB); });
  EXPECT_NE(e.find("weight_layout: expert_parallel does not apply"), std::string::npos) << e;
}

TEST(WeightLayout, WhatFitsReplicatedStaysReplicated) {
  const ModelInfo info = published("qwen3_5_27b");
  const RunConfig cfg = run(info, {"attn", "linear_attn"});
  const WeightLayoutChoice c = choose_weight_layout(cfg, info, 2, 141 * kGiB);
  EXPECT_FALSE(c.sharded) << c.note;
  EXPECT_NE(c.note.find("replicated"), std::string::npos) << c.note;
}

TEST(WeightLayout, NothingFitsIsRefusedWithWhatWouldFit) {
  const ModelInfo info = published("qwen3_5_397b_a17b");
  const RunConfig cfg = run(info, info.lora_groups);
  const std::string e = error_of([&] { choose_weight_layout(cfg, info, 2, 80 * kGiB); });
  EXPECT_NE(e.find("does not fit 2 GPUs in any weight layout"), std::string::npos) << e;
  EXPECT_NE(e.find("Any one of these would fit"), std::string::npos) << e;
  EXPECT_NE(e.find("more GPUs"), std::string::npos) << e;
}

TEST(WeightLayout, ExplicitLayoutThatDoesNotFitIsRefused) {
  const ModelInfo info = published("qwen3_5_35b_a3b");
  RunConfig cfg = run(info, info.lora_groups);
  cfg.weight_layout = "replicated";
  const std::string e = error_of([&] { choose_weight_layout(cfg, info, 2, 80 * kGiB); });
  EXPECT_NE(e.find("weight_layout: replicated does not fit 2 GPUs"), std::string::npos) << e;
  cfg.weight_layout = "sharded";
  EXPECT_TRUE(choose_weight_layout(cfg, info, 2, 80 * kGiB).sharded);
}

TEST(WeightLayout, AutoCheckpointingIsPlannedPerGpuWithTheLayout) {
  // 122B-A10B on 4 GPUs with LoRA on every text group: the single-GPU plan (one GPU holding everything) would
  // checkpoint every layer; with the experts split, an H200's share keeps the activations of some or all layers.
  const ModelInfo info = published("qwen3_5_122b_a10b");
  RunConfig cfg = run(info, {"attn", "linear_attn", "shared_expert", "experts"});
  ASSERT_TRUE(cfg.gradient_checkpointing_auto);
  const WeightLayoutChoice big = choose_weight_layout(cfg, info, 4, 141 * kGiB);
  EXPECT_TRUE(big.expert_parallel) << big.note;
  ASSERT_TRUE(big.checkpoint_layers.has_value()) << big.note;
  EXPECT_LT(*big.checkpoint_layers, info.num_layers) << big.note;
  EXPECT_NE(big.note.find("gradient_checkpointing: auto, expected peak"), std::string::npos) << big.note;
  // The plan it took fits each GPU less the margin, and one layer fewer checkpointed would not.
  ShardPlanSettings s;
  s.lora_r = 16;
  s.lora_groups = cfg.lora_target_groups;
  s.margin_bytes = memory_plan_margin(141 * kGiB);
  s.gradient_checkpointing = *big.checkpoint_layers > 0;
  s.checkpoint_layers = *big.checkpoint_layers;
  EXPECT_TRUE(layout_estimate(plan_multi_gpu(info, s, {4, 141 * kGiB}), WeightLayout::ExpertParallel).fits);
  if (*big.checkpoint_layers > 0) {
    s.checkpoint_layers -= 1;
    s.gradient_checkpointing = s.checkpoint_layers > 0;
    EXPECT_FALSE(layout_estimate(plan_multi_gpu(info, s, {4, 141 * kGiB}), WeightLayout::ExpertParallel).fits);
  }
  // 80 GB GPUs hold less per GPU: more layers are checkpointed than on the H200s.
  const WeightLayoutChoice small = choose_weight_layout(cfg, info, 4, 80 * kGiB);
  ASSERT_TRUE(small.checkpoint_layers.has_value()) << small.note;
  EXPECT_GT(*small.checkpoint_layers, *big.checkpoint_layers) << small.note;
  // A configured layout is kept and only the checkpointing planned for it.
  cfg.weight_layout = "expert_parallel_sharded";
  const WeightLayoutChoice fixed = choose_weight_layout(cfg, info, 4, 80 * kGiB);
  EXPECT_TRUE(fixed.sharded && fixed.expert_parallel) << fixed.note;
  EXPECT_NE(fixed.note.find("weight_layout: expert_parallel_sharded (as configured"), std::string::npos) << fixed.note;
  // Checkpointing as configured: no plan of it here.
  cfg.weight_layout = "auto";
  cfg.gradient_checkpointing_auto = false;
  cfg.gradient_checkpointing = true;
  EXPECT_FALSE(choose_weight_layout(cfg, info, 4, 141 * kGiB).checkpoint_layers.has_value());
}

TEST(WeightLayout, OneWorkerAndCpuWorkers) {
  const ModelInfo info = published("qwen3_5_35b_a3b");
  RunConfig cfg = run(info, info.lora_groups);
  cfg.weight_layout = "sharded";
  EXPECT_FALSE(choose_weight_layout(cfg, info, 1, 80 * kGiB).sharded);
  EXPECT_TRUE(choose_weight_layout(cfg, info, 2, 0).sharded);  // CPU workers: as configured
  cfg.weight_layout = "auto";
  EXPECT_FALSE(choose_weight_layout(cfg, info, 2, 0).sharded);
}

}  // namespace
}  // namespace deltatune
