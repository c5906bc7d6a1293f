// The fused loss on the target rows alone (loss_target_rows: prompt tokens masked, at least an eighth of the
// rows without a target): the same loss and LoRA gradients as the plain cross-entropy over every row's logits
// (fp32 CPU: the same per-row arithmetic; tolerance 1e-6 relative for the summation order), and not chosen
// when nearly every row has a target.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "../golden_files.h"
#include "backend/backend.h"
#include "model/qwen35_model.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

// The first half of every sequence's targets masked, as a chat prompt is.
Batch prompt_masked(const std::vector<Example>& seqs) {
  Batch b = testing_goldens::packed_batch(seqs);
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s)
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s] + (b.cu_seqlens[s + 1] - b.cu_seqlens[s]) / 2; ++t)
      b.targets[static_cast<size_t>(t)] = -100;
  b.num_targets = std::count_if(b.targets.begin(), b.targets.end(), [](int32_t x) { return x >= 0; });
  return b;
}

TEST(ModelLossRows, TargetRowsGiveThePlainLossAndGradients) {
  const std::string missing = testing_goldens::for_each_cpu_lora_golden(
      {"dense_vl", "moe_tied"},
      [](const std::string& name, testing_goldens::GoldenLoraModel& g, Backend& be, const fs::path& mdir) {
        Qwen35Model& model = g.model;
        LoraAdapter& adapter = g.adapter;
        const Batch batch = prompt_masked(testing_goldens::read_jsonl(mdir / "golden_eval.jsonl"));
        const std::vector<int32_t> rows = loss_target_rows(batch);
        ASSERT_EQ(static_cast<int64_t>(rows.size()), batch.num_targets) << name;
        ASSERT_GT(batch.num_targets, 0);

        auto run = [&](bool fused) {
          lora_zero_grad(adapter, be);
          StepOptions so;
          so.backward = true;
          so.fused_loss = fused;
          so.grad_scale = 1.f / static_cast<float>(batch.num_targets);
          return model.step(batch, &adapter, so).loss_sum;
        };
        const double plain = run(false);
        const std::vector<float> g0 = testing_goldens::all_lora_grads(adapter, be);
        const double rows_only = run(true);
        const std::vector<float> g1 = testing_goldens::all_lora_grads(adapter, be);
        EXPECT_NEAR(rows_only, plain, 1e-6 * std::fabs(plain)) << name;
        ASSERT_EQ(g1.size(), g0.size());
        const double norm = testing_goldens::max_abs(g0);
        ASSERT_GT(norm, 0.0);
        EXPECT_LE(testing_goldens::max_abs_diff(g1, g0), 1e-6 * norm) << name;
      });
  if (!missing.empty()) GTEST_SKIP() << "no goldens for " << missing;
}

TEST(ModelLossRows, EveryRowWhenNearlyAllHaveTargets) {
  Batch b;
  b.targets.assign(16, 5);
  b.targets[15] = -100;  // 15 of 16: one sequence's last token only
  b.num_targets = 15;
  EXPECT_TRUE(loss_target_rows(b).empty());
  b.targets = {5, 6, 7, 8, 9, 10, 11, -100};  // an eighth without a target
  b.num_targets = 7;
  EXPECT_EQ(loss_target_rows(b).size(), 7u);
  b.targets = {5, 6, -100, -100, 9, 10, 11, -100};
  b.num_targets = 5;
  EXPECT_EQ(loss_target_rows(b), (std::vector<int32_t>{0, 1, 4, 5, 6}));
  b.targets.assign(8, -100);
  b.num_targets = 0;
  EXPECT_TRUE(loss_target_rows(b).empty());
}

}  // namespace
}  // namespace deltatune
