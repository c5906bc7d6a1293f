// gradient_checkpointing: auto: the memory plan (deltatune/memory_plan.h) and the run file's values. Budgets are
// derived from estimate_vram of the golden models' shapes, so no activation size is written here.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "deltatune/error.h"
#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"
#include "deltatune/run_config.h"

namespace deltatune {
namespace {

std::string golden(const std::string& name) {
  return std::string(DT_SOURCE_DIR) + "/tests/goldens/models/" + name;
}

// Enough tokens that activations dominate the tiny models' weights.
constexpr int64_t kTokens = 65536;

MemoryPlan plan_for(const ModelInfo& info, int64_t free, bool fused = true) {
  MemoryPlanRequest req;
  req.lora_r = 8;
  req.tokens_per_step = kTokens;
  req.fused_loss = fused;
  req.free_bytes = free;
  return plan_memory(info, req);
}

// Position of a plan in the planner's speed order: fewer checkpointed layers first, then larger chunks.
std::tuple<int64_t, int64_t> rank_of(const MemoryPlan& p) { return {p.checkpoint_layers, -p.loss_chunk_rows}; }

// The least memory any layer count needs (with the engine's loss chunk).
int64_t least_total(const ModelInfo& info, bool fused = true) {
  int64_t least = -1;
  for (int64_t n = 0; n <= info.num_layers; ++n) {
    const int64_t t = estimate_vram(info, 8, kTokens, fused, n > 0, n).total;
    if (least < 0 || t < least) least = t;
  }
  return least;
}

int64_t free_for_budget(int64_t budget) {
  // The smallest free memory whose budget (free less the margin) is at least `budget`.
  int64_t free = budget;
  while (free - memory_plan_margin(free) < budget) free += budget - (free - memory_plan_margin(free));
  return free;
}

TEST(MemoryPlan, NothingCheckpointedWhenAllFits) {
  for (const char* name : {"dense_bf16", "moe_tied"}) {
    const ModelInfo info = model_info_load(golden(name));
    const VramEstimate none = estimate_vram(info, 8, kTokens, true, false);
    const MemoryPlan p = plan_for(info, free_for_budget(none.total));
    EXPECT_TRUE(p.fits) << name;
    EXPECT_FALSE(p.gradient_checkpointing) << name;
    EXPECT_EQ(p.checkpoint_layers, 0) << name;
    EXPECT_EQ(p.loss_chunk_rows, 1024) << name;
    EXPECT_EQ(p.estimate.total, none.total) << name;
  }
}

TEST(MemoryPlan, NeverExceedsBudgetAndIsMonotonicInMemory) {
  for (const char* name : {"dense_bf16", "moe_tied"}) {
    const ModelInfo info = model_info_load(golden(name));
    const int64_t least = least_total(info);
    const int64_t most = estimate_vram(info, 8, kTokens, true, false).total;
    ASSERT_LT(least, most) << name;
    MemoryPlan prev = plan_for(info, free_for_budget(least));
    EXPECT_TRUE(prev.fits) << name;
    EXPECT_EQ(prev.estimate.total, least) << name;
    // Checkpointing the last layer too only adds memory: every layer is never the plan.
    EXPECT_LT(prev.checkpoint_layers, info.num_layers) << name;
    int distinct = 1;
    for (int i = 1; i <= 200; ++i) {
      const int64_t budget = least + (most - least) * i / 200;
      const MemoryPlan p = plan_for(info, free_for_budget(budget));
      ASSERT_TRUE(p.fits) << name << " budget " << budget;
      EXPECT_LE(p.estimate.total, p.budget_bytes) << name;
      EXPECT_EQ(p.gradient_checkpointing, p.checkpoint_layers > 0) << name;
      // The plan's estimate is estimate_vram of its settings.
      EXPECT_EQ(p.estimate.total, estimate_vram(info, 8, kTokens, true, p.gradient_checkpointing,
                                                p.checkpoint_layers, "none", p.loss_chunk_rows)
                                      .total);
      // More memory never gives a slower plan.
      EXPECT_LE(rank_of(p), rank_of(prev)) << name << " budget " << budget;
      if (rank_of(p) != rank_of(prev)) ++distinct;
      // The fastest that fits: one layer fewer does not fit.
      if (p.checkpoint_layers > 0)
        EXPECT_GT(estimate_vram(info, 8, kTokens, true, p.checkpoint_layers > 1, p.checkpoint_layers - 1, "none",
                                p.loss_chunk_rows)
                      .total,
                  p.budget_bytes)
            << name;
      prev = p;
    }
    EXPECT_GT(distinct, 2) << name << ": the sweep should pass through partial checkpointing";
    EXPECT_FALSE(prev.gradient_checkpointing) << name;
  }
}

TEST(MemoryPlan, TooLittleMemoryGivesTheSmallestPlanMarkedNotFitting) {
  const ModelInfo info = model_info_load(golden("dense_bf16"));
  const int64_t least = least_total(info);
  const MemoryPlan p = plan_for(info, free_for_budget(least) - 1);
  EXPECT_FALSE(p.fits);
  EXPECT_TRUE(p.gradient_checkpointing);
  EXPECT_EQ(p.estimate.total, least);
  EXPECT_NE(memory_plan_text(info, p).find("EXCEEDS"), std::string::npos);
  EXPECT_THROW(plan_for(info, 0), Error);
}

TEST(MemoryPlan, UnfusedLossHasNoChunks) {
  const ModelInfo info = model_info_load(golden("dense_bf16"));
  const int64_t least = least_total(info, false);
  const MemoryPlan p = plan_for(info, free_for_budget(least), false);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.loss_chunk_rows, 1024);
  EXPECT_EQ(p.estimate.total, least);
}

TEST(MemoryPlan, RunFileValues) {
  EXPECT_TRUE(RunConfig{}.gradient_checkpointing_auto);
  const RunConfig dflt = run_config_from_yaml_string("base_model: m\n");
  EXPECT_TRUE(dflt.gradient_checkpointing_auto);
  const RunConfig n = run_config_from_yaml_string("gradient_checkpointing: 8\n");
  EXPECT_FALSE(n.gradient_checkpointing_auto);
  EXPECT_TRUE(n.gradient_checkpointing);
  EXPECT_EQ(n.gradient_checkpointing_layers, 8);
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(n)), n);
  const RunConfig off = run_config_from_yaml_string("gradient_checkpointing: false\n");
  EXPECT_FALSE(off.gradient_checkpointing_auto);
  EXPECT_FALSE(off.gradient_checkpointing);
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(off)), off);
  const RunConfig on = run_config_from_yaml_string("gradient_checkpointing: true\n");
  EXPECT_TRUE(on.gradient_checkpointing);
  EXPECT_EQ(on.gradient_checkpointing_layers, -1);
  EXPECT_FALSE(run_config_from_yaml_string("gradient_checkpointing: 0\n").gradient_checkpointing);
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(dflt)), dflt);
  for (const char* bad : {"gradient_checkpointing: sometimes\n", "gradient_checkpointing: -3\n",
                          "gradient_checkpointing: auto\ngradient_checkpointing_layers: 4\n"}) {
    try {
      run_config_from_yaml_string(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gradient_checkpointing:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deltatune
