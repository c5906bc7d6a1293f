// Gradient checkpointing of only the first N layers (StepOptions::checkpoint_layers, run config key
// gradient_checkpointing_layers) computes the same loss and LoRA gradients as checkpointing every layer and
// as none: the recompute of a checkpointed layer repeats the same fp32 CPU arithmetic, so results agree to
// rounding of the summation order at most (tolerance 1e-6 relative; in practice they are bit-identical).
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

TEST(ModelCheckpointLayers, SameLossAndGradientsAsFullAndNoCheckpointing) {
  const std::string missing = testing_goldens::for_each_cpu_lora_golden(
      {"dense_vl", "moe_tied"},
      [](const std::string& name, testing_goldens::GoldenLoraModel& g, Backend& be, const fs::path& mdir) {
        Qwen35Model& model = g.model;
        LoraAdapter& adapter = g.adapter;
        ASSERT_GE(model.config().num_layers, 2);
        const auto seqs = testing_goldens::read_jsonl(mdir / "golden_eval.jsonl");

        StepOptions plain;
        const double loss0 = testing_goldens::lora_golden_step(model, be, adapter, seqs, plain);
        const std::vector<float> g0 = testing_goldens::all_lora_grads(adapter, be);
        const double norm = testing_goldens::max_abs(g0);
        ASSERT_GT(norm, 0.0);
        for (int64_t n : {int64_t(-1), int64_t(0), int64_t(1), model.config().num_layers - 1}) {
          StepOptions so;
          so.gradient_checkpointing = true;
          so.checkpoint_layers = n;
          const double loss = testing_goldens::lora_golden_step(model, be, adapter, seqs, so);
          EXPECT_NEAR(loss, loss0, 1e-6 * std::fabs(loss0)) << name << " checkpoint_layers " << n;
          const std::vector<float> g1 = testing_goldens::all_lora_grads(adapter, be);
          ASSERT_EQ(g1.size(), g0.size());
          EXPECT_LE(testing_goldens::max_abs_diff(g1, g0), 1e-6 * norm) << name << " checkpoint_layers " << n;
        }
      });
  if (!missing.empty()) GTEST_SKIP() << "no goldens for " << missing;
}

}  // namespace
}  // namespace deltatune
