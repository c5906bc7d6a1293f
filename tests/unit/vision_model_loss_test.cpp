// The text model fed images, on the CPU backend in fp32, against transformers' Qwen3_5ForConditionalGeneration
// on the tiny random checkpoint of tests/goldens/vision/make_model_goldens.py: one sequence with two images
// (merged tokens replacing the image-token rows, interleaved multimodal RoPE in the full-attention layer),
// loss on its last 9 text tokens. Bar: 1e-5 relative (fp32 on both sides). With a PEFT adapter on every
// text-model target, and one on those plus the vision tower's blocks (make_lora_goldens.py): the loss, and every
// LoRA gradient within the text goldens' tolerance (norm-relative 1e-4, model_golden_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../golden_files.h"
#include "../vision_golden_batch.h"
#include "backend/backend.h"
#include "core/error.h"
#include "data/batch.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "data/batch_images.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kVision = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";

using testing_goldens::i32_values;

Batch golden_batch(const VisionConfig& vcfg) { return testing_goldens::vision_golden_batch(kVision, vcfg); }

TEST(VisionModel, LossWithImagesMatchesTransformers) {
  const fs::path dir = kVision / "model";
  const ModelWeights w = model_weights_load(dir.string());
  const VisionConfig vcfg = vision_config_read(dir.string());
  EXPECT_EQ(w.config.mrope_section, (std::array<int64_t, 3>{2, 3, 3}));
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  model.set_vision(std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg)));
  const Batch b = golden_batch(vcfg);
  ASSERT_EQ(b.image_grids.size(), 2u);

  // The batch's positions are transformers' get_rope_index.
  const SafetensorsFile golden((kVision / "model_golden.safetensors").string());
  EXPECT_EQ(b.mrope_positions, i32_values(golden.get("position_ids")));

  const StepOutput out = model.step(b, nullptr, StepOptions{});
  const double hf = testing_goldens::read_json(kVision / "model_golden.json")["loss"].get<double>();
  const double loss = out.loss_sum / double(out.targets);
  std::printf("loss %.9f, transformers %.9f, rel diff %.2e\n", loss, hf, std::abs(loss - hf) / hf);
  const std::vector<int32_t> labels = i32_values(golden.get("labels"));
  int64_t labelled = 0;  // HF's shifted labels: every label but the first is predicted from the token before it
  for (size_t t = 1; t < labels.size(); ++t) labelled += labels[t] != -100;
  EXPECT_EQ(out.targets, labelled);
  EXPECT_GT(labelled, 0);
  EXPECT_NEAR(loss, hf, 1e-5 * hf);
}

TEST(VisionModel, ImagesChangeTheLossAndNeedTheTower) {
  const fs::path dir = kVision / "model";
  const ModelWeights w = model_weights_load(dir.string());
  const VisionConfig vcfg = vision_config_read(dir.string());
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  const Batch with_images = golden_batch(vcfg);
  EXPECT_THROW(model.step(with_images, nullptr, StepOptions{}), Error);  // no tower attached
  model.set_vision(std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg)));
  Batch text_only = with_images;
  text_only.pixel_values.clear();
  text_only.image_grids.clear();
  text_only.mrope_positions.clear();
  const StepOutput a = model.step(with_images, nullptr, StepOptions{});
  const StepOutput t = model.step(text_only, nullptr, StepOptions{});
  EXPECT_GT(std::abs(a.loss_sum - t.loss_sum), 1e-3 * std::abs(t.loss_sum));

  Batch missing = with_images;
  missing.image_grids.pop_back();
  EXPECT_THROW(model.step(missing, nullptr, StepOptions{}), Error);
}

// The golden adapter of `folder` (make_lora_goldens.py) on the golden sequence: the loss and every LoRA gradient.
void expect_lora_golden(const std::string& folder) {
  const fs::path dir = kVision / "model";
  const ModelWeights w = model_weights_load(dir.string());
  const VisionConfig vcfg = vision_config_read(dir.string());
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  model.set_vision(std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg)));
  LoraAdapter adapter = peft_adapter_read((kVision / folder / "adapter").string(), w.config);
  lora_to_backend(adapter, *be);
  lora_zero_grad(adapter, *be);
  const Batch b = golden_batch(vcfg);
  StepOptions so;
  so.backward = true;
  so.grad_scale = 1.f / static_cast<float>(b.num_targets);
  const StepOutput out = model.step(b, &adapter, so);
  const auto golden = testing_goldens::read_json(kVision / folder / "golden.json");
  const double hf = golden["loss"].get<double>(), loss = out.loss_sum / double(out.targets);
  std::printf("%s: LoRA loss %.9f, PEFT %.9f, rel diff %.2e\n", folder.c_str(), loss, hf, std::abs(loss - hf) / hf);
  EXPECT_NEAR(loss, hf, 1e-5 * hf);
  const auto errors = testing_goldens::lora_grad_errors(*be, adapter, kVision / folder / "grads.safetensors");
  double worst = 0, worst_vision = 0;
  int vision = 0;
  for (const auto& e : errors) {
    EXPECT_LE(e.rel, 1e-4) << e.name;
    worst = std::max(worst, e.rel);
    if (e.name.find(".visual.") != std::string::npos) {
      ++vision;
      worst_vision = std::max(worst_vision, e.rel);
    }
  }
  std::printf("%s: %zu LoRA gradients, worst norm-relative error %.2e (%d of the vision tower, worst %.2e)\n",
              folder.c_str(), errors.size(), worst, vision, worst_vision);
  EXPECT_EQ(static_cast<int>(errors.size()), golden["num_grads"].get<int>());
}

TEST(VisionModel, LoraGradientsWithImagesMatchPeft) { expect_lora_golden("lora"); }

// The `vision` group too (the tower blocks' qkv, proj, fc1, fc2): the gradient flows from the text model's
// image-token rows back through the merger and the blocks.
TEST(VisionModel, VisionGroupLoraGradientsMatchPeft) { expect_lora_golden("lora_vision"); }

}  // namespace
}  // namespace deltatune
