// gradient_checkpointing: auto: the memory plan (deltatune/memory_plan.h) and the run file's values. Budgets are
// derived from estimate_vram of the golden models' shapes, so no activation size is written here.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "deltatune/error.h"
#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"
#include "deltatune/run_config.h"
#include "memory_plan_request.h"

namespace deltatune {
namespace {

using namespace memory_plan_test;

// Enough tokens that activations dominate the tiny models' weights.
constexpr int64_t kTokens = 65536;

MemoryPlan plan_for(const ModelInfo& info, int64_t free, bool fused = true) {
  MemoryPlanRequest req = plan_request(kTokens, free);
  req.fused_loss = fused;
  return plan_memory(info, req);
}

// Position of a plan in the planner's speed order: less recompute work first, then larger chunks.
std::tuple<double, int64_t> rank_of(const MemoryPlan& p) { return {p.recompute_cost, -p.loss_chunk_rows}; }

// The fewest checkpointed layers whose estimate, nothing kept, fits `budget` (the planner before selective
// recompute); -1 when none does.
int64_t fewest_layers_fitting(const ModelInfo& info, int64_t budget) {
  for (int64_t n = 0; n <= info.num_layers; ++n)
    if (estimate_vram(info, 8, kTokens, true, n > 0, n).total <= budget) return n;
  return -1;
}

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
    int distinct = 1, kept = 0;
    for (int i = 1; i <= 200; ++i) {
      const int64_t budget = least + (most - least) * i / 200;
      const MemoryPlan p = plan_for(info, free_for_budget(budget));
      ASSERT_TRUE(p.fits) << name << " budget " << budget;
      EXPECT_LE(p.estimate.total, p.budget_bytes) << name;
      EXPECT_EQ(p.gradient_checkpointing, p.checkpoint_layers > 0) << name;
      // The plan's estimate is estimate_vram of its settings plus what it keeps for the recompute.
      EXPECT_EQ(p.keep_bytes, recompute_keep_bytes(info, kTokens, p.checkpoint_layers, p.keep)) << name;
      EXPECT_EQ(p.estimate.total, estimate_vram(info, 8, kTokens, true, p.gradient_checkpointing,
                                                p.checkpoint_layers, "none", p.loss_chunk_rows)
                                          .total +
                                      p.keep_bytes);
      EXPECT_EQ(p.recompute_cost, recompute_cost(info, kTokens, p.checkpoint_layers, p.keep)) << name;
      EXPECT_FALSE(p.keep.gdn_core) << name;
      if (info.is_moe) EXPECT_EQ(p.keep.mlp_layers, 0) << name;
      // More memory never gives a slower plan.
      EXPECT_LE(rank_of(p), rank_of(prev)) << name << " budget " << budget;
      if (rank_of(p) != rank_of(prev)) ++distinct;
      // Never slower (by the cost model) than the fewest checkpointed layers that fit with nothing kept.
      const int64_t n0 = fewest_layers_fitting(info, p.budget_bytes);
      ASSERT_GE(n0, 0) << name;
      EXPECT_LE(p.recompute_cost, recompute_cost(info, kTokens, n0, {})) << name << " budget " << budget;
      if (p.keep.any()) ++kept;
      prev = p;
    }
    EXPECT_GT(distinct, 2) << name << ": the sweep should pass through partial checkpointing";
    EXPECT_GT(kept, 0) << name << ": the sweep should pass through plans that keep something for the recompute";
    EXPECT_FALSE(prev.gradient_checkpointing) << name;
  }
}

// What selective recompute keeps, counted per layer kind: the attention core (bf16 output, fp32 logsumexp) of the
// checkpointed full-attention layers, the dense MLP's gate and up outputs of the first N, and the GDN core's
// output with its backward scratch; keeping a part removes its weighted work from the recompute cost.
TEST(MemoryPlan, RecomputeKeepBytesAndCost) {
  const ModelInfo info = model_info_load(golden("dense_bf16"));
  const int64_t T = 4096, L = info.num_layers;
  int64_t attn_layers = 0;
  for (const std::string& t : info.layer_types) attn_layers += t == "full_attention";
  ASSERT_GT(attn_layers, 0);
  ASSERT_LT(attn_layers, L);
  RecomputeKeep attn, mlp2, all_mlp, gdn;
  attn.attn_core = true;
  mlp2.mlp_layers = 2;
  all_mlp.mlp_layers = -1;
  gdn.gdn_core = true;
  EXPECT_EQ(recompute_keep_bytes(info, T, -1, {}), 0);
  EXPECT_EQ(recompute_keep_bytes(info, T, -1, attn),
            attn_layers * T * info.num_attention_heads * (2 * info.head_dim + 4));
  EXPECT_EQ(recompute_keep_bytes(info, T, -1, mlp2), 2 * 2 * T * info.intermediate_size * 2);
  EXPECT_EQ(recompute_keep_bytes(info, T, 1, mlp2), 2 * T * info.intermediate_size * 2);  // first 1 checkpointed
  EXPECT_EQ(recompute_keep_bytes(info, T, -1, all_mlp), L * 2 * T * info.intermediate_size * 2);
  EXPECT_GT(recompute_keep_bytes(info, T, -1, gdn), (L - attn_layers) * T * info.linear_num_value_heads *
                                                        info.linear_value_head_dim * 2);
  const double none = recompute_cost(info, T, -1, {});
  EXPECT_EQ(recompute_cost(info, T, 0, {}), 0.0);
  for (const RecomputeKeep& k : {attn, mlp2, all_mlp, gdn}) EXPECT_LT(recompute_cost(info, T, -1, k), none);
  EXPECT_LT(recompute_cost(info, T, -1, all_mlp), recompute_cost(info, T, -1, mlp2));
  EXPECT_EQ(recompute_keep_text(info, attn, -1), "attention core");
  RecomputeKeep both = attn;
  both.mlp_layers = 2;
  EXPECT_EQ(recompute_keep_text(info, both, -1), "attention core, MLP gate/up of layers 0-1");
  EXPECT_EQ(recompute_keep_text(info, all_mlp, 3), "MLP gate/up");
  EXPECT_EQ(recompute_keep_text(info, {}, 3), "nothing");
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

// loss_logits: bf16 (deltatune/loss_logits.h): the fused loss's buffers are rows × V × 2 bytes (the gradient over
// the logits) instead of fp32 logits and their bf16 gradient (rows × V × 6), up to 3 times the fp32 form's rows
// (2^26 / V rounded down to 16: 256 at Qwen3.5's 248,320). Counted at the peak at the loss (nothing checkpointed,
// a tiny model beside a large vocabulary); nothing else in the estimate moves.
TEST(MemoryPlan, Bf16LogitsLossBuffers) {
  ModelInfo info = model_info_load(golden("dense_bf16"));
  info.vocab_size = 248320;
  const int64_t V = info.vocab_size;
  auto est = [&](int64_t tokens, int64_t chunk, LossLogits l) {
    return estimate_vram(info, 8, tokens, true, false, -1, "none", chunk, {}, {}, false, l);
  };
  for (const auto& [tokens, chunk, rows32, rows16] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{4096, 1024, 256, 768}, {4096, 384, 256, 384},
        {512, 1024, 256, 512}, {100, 1024, 100, 100}}) {
    const VramEstimate f = est(tokens, chunk, LossLogits::F32), b = est(tokens, chunk, LossLogits::BF16);
    EXPECT_EQ(f.logits, rows32 * V * 6) << tokens << " " << chunk;
    EXPECT_EQ(b.logits, rows16 * V * 2) << tokens << " " << chunk;
    EXPECT_EQ(b.activations, f.activations) << tokens << " " << chunk;
    EXPECT_EQ(b.total - b.logits, f.total - f.logits) << tokens << " " << chunk;
  }
  EXPECT_EQ(est(4096, 1024, LossLogits::BF16).total, est(4096, 1024, LossLogits::F32).total);  // the same bytes
  EXPECT_EQ(est(4096, 384, LossLogits::F32).logits, 2 * est(4096, 384, LossLogits::BF16).logits);  // half: 182 MiB
  // Unfused: the [T, V] logits whatever loss_logits says.
  EXPECT_EQ(estimate_vram(info, 8, 4096, false, false, -1, "none", 1024, {}, {}, false, LossLogits::BF16).total,
            estimate_vram(info, 8, 4096, false, false).total);
}

// With bf16 logits the plan also tries half the bf16 rows (384 at V 248,320) and takes them only where they pay:
// with room for the wide chunks it keeps 1024 rows asked (768 held: the faster loss); where only the narrow chunks
// fit without checkpointing, it takes them (fp32 logits there must checkpoint or do not fit).
TEST(MemoryPlan, Bf16LogitsPlanSpendsTheSmallerLossBuffers) {
  ModelInfo info = model_info_load(golden("dense_bf16"));
  info.vocab_size = 248320;
  const int64_t T = 4096;
  auto plan = [&](int64_t free, LossLogits l) {
    MemoryPlanRequest req = plan_request(T, free);
    req.loss_logits = l;
    return plan_memory(info, req);
  };
  const int64_t narrow =
      estimate_vram(info, 8, T, true, false, -1, "none", 384, {}, {}, false, LossLogits::BF16).total;
  const int64_t wide = estimate_vram(info, 8, T, true, false, -1, "none", 1024, {}, {}, false, LossLogits::BF16).total;
  ASSERT_LT(narrow, wide);
  const MemoryPlan roomy = plan(free_for_budget(wide), LossLogits::BF16);
  EXPECT_TRUE(roomy.fits);
  EXPECT_FALSE(roomy.gradient_checkpointing);
  EXPECT_EQ(roomy.loss_chunk_rows, 1024);
  EXPECT_EQ(roomy.loss_logits, LossLogits::BF16);
  EXPECT_EQ(roomy.estimate.total, wide);
  EXPECT_NE(memory_plan_text(info, roomy).find("loss chunks of 1024 rows of bf16 logits"), std::string::npos)
      << memory_plan_text(info, roomy);
  const MemoryPlan tight = plan(free_for_budget(narrow), LossLogits::BF16);
  EXPECT_TRUE(tight.fits);
  EXPECT_FALSE(tight.gradient_checkpointing);
  EXPECT_EQ(tight.loss_chunk_rows, 384);
  EXPECT_EQ(tight.estimate.total, narrow);
  EXPECT_NE(memory_plan_text(info, tight).find("loss chunks of 384 rows of bf16 logits"), std::string::npos)
      << memory_plan_text(info, tight);
  const MemoryPlan f32 = plan(free_for_budget(narrow), LossLogits::F32);
  EXPECT_TRUE(f32.gradient_checkpointing || !f32.fits);
  EXPECT_EQ(f32.loss_chunk_rows, 1024);
  EXPECT_EQ(memory_plan_text(info, f32).find("bf16"), std::string::npos);
}

// The narrower bf16 chunks cost loss time (MemoryPlan::loss_cost: more passes over the lm_head weight); the plan
// takes them only where that buys more recompute than it costs. At 4096 tokens the wide bf16 chunks hold the fp32
// form's bytes, so the fp32 plan at the same budget is the best plan with wide chunks: the bf16 plan is never
// slower by the planner's order, and a narrow pick is strictly faster than it or fits where it does not.
TEST(MemoryPlan, Bf16NarrowChunksOnlyWhereTheyPay) {
  ModelInfo small = model_info_load(golden("dense_bf16"));
  small.vocab_size = 248320;
  const ModelInfo big = model_info_from_config(std::string(DT_SOURCE_DIR) +
                                               "/tests/fixtures/published_configs/qwen3_5_27b.json");
  for (const ModelInfo* info : std::initializer_list<const ModelInfo*>{&small, &big}) {
    auto plan = [&](int64_t free, LossLogits l) {
      MemoryPlanRequest req;
      req.lora_r = 16;
      req.tokens_per_step = 4096;
      req.free_bytes = free;
      req.loss_logits = l;
      req.host_offload = true;
      return plan_memory(*info, req);
    };
    const int64_t lo = plan(int64_t{1} << 50, LossLogits::F32).estimate.total / 2;
    const int64_t hi = estimate_vram(*info, 16, 4096, true, false).total * 11 / 10;
    int narrow = 0;
    for (int i = 0; i <= 120; ++i) {
      const int64_t free = free_for_budget(lo + (hi - lo) * i / 120);
      const MemoryPlan b = plan(free, LossLogits::BF16), f = plan(free, LossLogits::F32);
      EXPECT_EQ(b.loss_cost == 0, b.loss_chunk_rows == 1024) << info->num_layers << " " << i;
      if (!b.fits) continue;
      if (b.loss_chunk_rows != 1024) ++narrow;
      if (!f.fits) continue;
      EXPECT_LE(b.recompute_cost + b.loss_cost, f.recompute_cost) << info->num_layers << " " << i;
      if (b.loss_chunk_rows != 1024) EXPECT_LT(b.recompute_cost + b.loss_cost, f.recompute_cost);
    }
    if (info == &small) EXPECT_GT(narrow, 0) << "a tiny model beside a 248K vocabulary: narrow chunks where only they fit";
  }
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
