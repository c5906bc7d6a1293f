// Gradient checkpointing of only the first N layers (StepOptions::checkpoint_layers, run config key
// gradient_checkpointing_layers) computes the same loss and LoRA gradients as checkpointing every layer and as
// none: the recompute of a checkpointed layer repeats the same fp32 CPU arithmetic, so results agree to
// rounding of the summation order at most (tolerance 1e-6 relative; in practice they are bit-identical).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "../golden_files.h"
#include "backend/backend.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kGoldens = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";

TEST(ModelCheckpointLayers, SameLossAndGradientsAsFullAndNoCheckpointing) {
  for (const char* name : {"dense_vl", "moe_tied"}) {
    const fs::path gdir = kGoldens / "lora" / name, mdir = kGoldens / "models" / name;
    if (!fs::exists(gdir) || !fs::exists(mdir)) GTEST_SKIP() << "no goldens for " << name;
    ModelWeights w = model_weights_load(mdir.string());
    auto be = make_cpu_backend(2);
    Qwen35Model model(w, *be);
    ASSERT_GE(model.config().num_layers, 2);
    LoraAdapter adapter = peft_adapter_read((gdir / "adapter").string(), w.config);
    lora_to_backend(adapter, *be);
    const auto seqs = testing_goldens::read_jsonl(mdir / "golden_eval.jsonl");

    StepOptions plain;
    const double loss0 = testing_goldens::lora_golden_step(model, *be, adapter, seqs, plain);
    const std::vector<float> g0 = testing_goldens::all_lora_grads(adapter, *be);
    double norm = 0;
    for (float x : g0) norm = std::max(norm, double(std::fabs(x)));
    ASSERT_GT(norm, 0.0);
    for (int64_t n : {int64_t(-1), int64_t(0), int64_t(1), model.config().num_layers - 1}) {
      StepOptions so;
      so.gradient_checkpointing = true;
      so.checkpoint_layers = n;
      const double loss = testing_goldens::lora_golden_step(model, *be, adapter, seqs, so);
      EXPECT_NEAR(loss, loss0, 1e-6 * std::fabs(loss0)) << name << " checkpoint_layers " << n;
      const std::vector<float> g = testing_goldens::all_lora_grads(adapter, *be);
      ASSERT_EQ(g.size(), g0.size());
      double worst = 0;
      for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, double(std::fabs(g[i] - g0[i])));
      EXPECT_LE(worst, 1e-6 * norm) << name << " checkpoint_layers " << n;
    }
  }
}

}  // namespace
}  // namespace deltatune
