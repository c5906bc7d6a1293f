// gradient_checkpointing: auto with the checkpointed layers' inputs in host memory (RecomputeKeep::inputs_on_host,
// MemoryPlanRequest::host_offload): the estimate without the stashed inputs, the plan taking it only where it lowers
// the recompute, and the host bytes it reports. Budgets derived from estimate_vram of the golden models' shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"
#include "memory_plan_request.h"

namespace deltatune {
namespace {

using namespace memory_plan_test;

constexpr int64_t kTokens = 65536;

MemoryPlan plan_for(const ModelInfo& info, int64_t free, bool host) {
  MemoryPlanRequest req = plan_request(kTokens, free);
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
      EXPECT_EQ(host.host_bytes, input * std::min(host.checkpoint_layers, L - 1) +
                                     mlp_host_layers(info, host.checkpoint_layers, host.keep) * 2 * kTokens *
                                         info.intermediate_size * 2)
          << name;
      if (host.keep.mlp_host_every > 0) EXPECT_EQ(host.keep.mlp_host_every, mlp_host_spacing(info, kTokens)) << name;
      EXPECT_EQ(host.estimate.total, estimate(info, host.checkpoint_layers, true).total + host.keep_bytes) << name;
      EXPECT_NE(memory_plan_text(info, host).find("page-locked host memory"), std::string::npos) << name;
    }
    EXPECT_GT(on_host, 0) << name << ": some budget should pay for the inputs in host memory";
  }
}

// RecomputeKeep::mlp_host_every: every k-th layer past the device-kept ones, never the last layer; its gate/up skip
// the recompute's GEMMs (cost) and cost one layer's gate/up on the device (the one fetched a layer ahead).
TEST(MemoryPlanHost, GateUpInHostMemory) {
  const ModelInfo info = model_info_load(golden("dense_bf16"));
  const int64_t L = info.num_layers, gu = 2 * kTokens * info.intermediate_size * 2;
  ASSERT_GE(L, 4);
  RecomputeKeep k;
  k.inputs_on_host = true;
  k.mlp_layers = 1;
  k.mlp_host_every = 2;  // layers 2, 4, ... below L - 1
  int64_t expect = 0;
  for (int64_t i = 0; i < L - 1; ++i) expect += (i >= 1 && (i - 1) % 2 == 1) ? 1 : 0;
  EXPECT_EQ(mlp_host_layers(info, -1, k), expect);
  RecomputeKeep dev = k;
  dev.mlp_host_every = 0;
  EXPECT_EQ(recompute_keep_bytes(info, kTokens, -1, k), recompute_keep_bytes(info, kTokens, -1, dev) + gu);
  EXPECT_LT(recompute_cost(info, kTokens, -1, k), recompute_cost(info, kTokens, -1, dev));
  RecomputeKeep off = k;
  off.inputs_on_host = false;  // no stash: nothing in host memory
  EXPECT_EQ(mlp_host_layers(info, -1, off), 0);
  EXPECT_GE(mlp_host_spacing(info, kTokens), 0);
  EXPECT_NE(recompute_keep_text(info, k, -1).find("in host memory"), std::string::npos);
}

}  // namespace
}  // namespace deltatune
