// gradient_checkpointing: auto with the checkpointed layers' inputs in host memory (RecomputeKeep::inputs_on_host,
// MemoryPlanRequest::host_offload): the estimate without the stashed inputs, the plan taking it only where it lowers
// the recompute, and the host bytes it reports. Budgets derived from estimate_vram of the golden models' shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"

namespace deltatune {
namespace {

std::string golden(const std::string& name) {
  return std::string(DT_SOURCE_DIR) + "/tests/goldens/models/" + name;
}

constexpr int64_t kTokens = 65536;

MemoryPlan plan_for(const ModelInfo& info, int64_t free, bool host) {
  MemoryPlanRequest req;
  req.lora_r = 8;
  req.tokens_per_step = kTokens;
  req.free_bytes = free;
  req.host_offload = host;
  return plan_memory(info, req);
}

VramEstimate estimate(const ModelInfo& info, int64_t n, bool host) {
  return estimate_vram(info, 8, kTokens, true, n > 0, n, "none", 1024, {}, {}, host);
}

// The device holds the last layer's input at the loss and two inputs in a recompute instead of every checkpointed
// layer's: the estimate drops by (L-2) to (L-1) inputs (the larger moment decides), plus the allocator's slack.
TEST(MemoryPlanHost, EstimateLeavesTheStashedInputsOut) {
  for (const char* name : {"dense_bf16", "moe_tied"}) {
    const ModelInfo info = model_info_load(golden(name));
    const int64_t L = info.num_layers, input = 2 * kTokens * info.hidden_size;
    ASSERT_GE(L, 3) << name;
    const int64_t saved = estimate(info, L, false).total - estimate(info, L, true).total;
    EXPECT_GE(saved, (L - 2) * input) << name;
    EXPECT_LE(saved, (L - 1) * input + (L - 1) * input / 256 + 1) << name;
    EXPECT_EQ(estimate(info, 0, true).total, estimate(info, 0, false).total) << name;
  }
}

TEST(MemoryPlanHost, TakenOnlyWhereItLowersTheRecompute) {
  for (const char* name : {"dense_bf16", "moe_tied"}) {
    const ModelInfo info = model_info_load(golden(name));
    const int64_t L = info.num_layers, input = 2 * kTokens * info.hidden_size;
    int64_t least = -1;
    for (int64_t n = 0; n <= L; ++n) {
      const int64_t t = estimate(info, n, true).total;
      if (least < 0 || t < least) least = t;
    }
    const int64_t most = estimate(info, 0, false).total;
    int on_host = 0;
    for (int i = 0; i <= 100; ++i) {
      const int64_t budget = least + (most - least) * i / 100;
      int64_t free = budget;
      while (free - memory_plan_margin(free) < budget) free += budget - (free - memory_plan_margin(free));
      const MemoryPlan dev = plan_for(info, free, false), host = plan_for(info, free, true);
      ASSERT_TRUE(host.fits) << name << " budget " << budget;
      EXPECT_LE(host.estimate.total, host.budget_bytes) << name;
      EXPECT_FALSE(dev.keep.inputs_on_host) << name;
      EXPECT_EQ(dev.host_bytes, 0) << name;
      if (dev.fits) EXPECT_LE(host.recompute_cost, dev.recompute_cost) << name << " budget " << budget;
      if (!host.keep.inputs_on_host) {
        EXPECT_EQ(host.host_bytes, 0) << name;
        continue;
      }
      ++on_host;
      ASSERT_TRUE(host.gradient_checkpointing) << name;
      EXPECT_TRUE(!dev.fits || host.recompute_cost < dev.recompute_cost) << name << " budget " << budget;
      EXPECT_EQ(host.host_bytes, input * std::min(host.checkpoint_layers, L - 1)) << name;
      EXPECT_EQ(host.estimate.total, estimate(info, host.checkpoint_layers, true).total + host.keep_bytes) << name;
      EXPECT_NE(memory_plan_text(info, host).find("page-locked host memory"), std::string::npos) << name;
    }
    EXPECT_GT(on_host, 0) << name << ": some budget should pay for the inputs in host memory";
  }
}

}  // namespace
}  // namespace deltatune
