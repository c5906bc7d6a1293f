// Which weight layout a multi-worker run takes (train/weight_layout_select.h) on the published Qwen3.5 shapes:
// the plan's choice (expert parallel included), explicit layouts checked against
// the plan, and a refusal that carries the plan's text with what would fit.
#include <gtest/gtest.h>

#include <string>

#include "deltatune/error.h"
#include "deltatune/shard_plan.h"
#include "error_text.h"
#include "train/weight_layout_select.h"

namespace deltatune {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

ModelInfo published(const std::string& name) {
  return model_info_from_config(std::string(DT_SOURCE_DIR) + "/tests/fixtures/published_configs/" + name + ".json");
}

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
