// Router statistics of a training step on the tiny MoE checkpoint: every layer routes T·K slots, counted
// once (also with gradient checkpointing, whose recompute must not count again); dense models report none.
#include <gtest/gtest.h>

#include <filesystem>

#include "../golden_files.h"
#include "backend/backend.h"
#include "model/moe_load_stats.h"
#include "model/qwen35_model.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kModels = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "models";

TEST(ModelMoeLoad, StepCountsEveryRoutedSlotOncePerLayer) {
  const fs::path dir = kModels / "moe_tied";
  if (!fs::exists(dir)) GTEST_SKIP() << "no golden checkpoint " << dir;
  ModelWeights w = model_weights_load(dir.string());
  auto be = make_cpu_backend(2);
  Qwen35Model model(w, *be);
  const auto& cfg = model.config();
  ASSERT_TRUE(cfg.is_moe());
  const Batch batch = testing_goldens::packed_batch(testing_goldens::read_jsonl(dir / "golden_eval.jsonl"));
  const int64_t T = static_cast<int64_t>(batch.input_ids.size());
  for (bool checkpointing : {false, true}) {
    StepOptions opts;
    opts.backward = true;
    opts.gradient_checkpointing = checkpointing;
    const StepOutput out = model.step(batch, nullptr, opts);
    ASSERT_TRUE(out.moe_load.defined());
    const Tensor load = be->download(out.moe_load, DType::F32);
    ASSERT_EQ(load.shape, (Shape{cfg.num_layers, cfg.num_experts}));
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      double sum = 0;
      for (int64_t e = 0; e < cfg.num_experts; ++e) sum += load.ptr<float>()[l * cfg.num_experts + e];
      EXPECT_EQ(sum, double(T * cfg.top_k)) << "layer " << l << (checkpointing ? " (checkpointing)" : "");
    }
    const MoeLoadStats s = moe_load_stats(load);
    EXPECT_GE(s.max_ratio, 1.0);
    EXPECT_LE(s.max_ratio, double(cfg.num_experts));
    EXPECT_GE(s.cv, 0.0);
  }
}

TEST(ModelMoeLoad, DenseModelsHaveNone) {
  const fs::path dir = kModels / "dense_vl";
  if (!fs::exists(dir)) GTEST_SKIP() << "no golden checkpoint " << dir;
  ModelWeights w = model_weights_load(dir.string());
  auto be = make_cpu_backend(2);
  Qwen35Model model(w, *be);
  const Batch batch = testing_goldens::packed_batch(testing_goldens::read_jsonl(dir / "golden_eval.jsonl"));
  EXPECT_FALSE(model.step(batch, nullptr, StepOptions{}).moe_load.defined());
}

}  // namespace
}  // namespace deltatune
