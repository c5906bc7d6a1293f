// The vision encoder + merger on the CPU (fp32) against transformers' Qwen3_5VisionModel on the tiny random
// checkpoint of tests/goldens/vision/make_model_goldens.py (depth 2, hidden 32, 2 heads, 4x4 position table
// interpolated to 4x4..6x4 grids), fed the image processor's pixel_values of six images.
// Tolerance: max |diff| <= 1e-5 relative to the largest |value| of each output (fp32 on both sides; HF's
// matmuls round in fp32, ours accumulate in double). Measured (transformers 5.24, torch 2.15 CPU): 0.9-1.5e-6
// for the last block's output and 0.7-1.5e-6 for the merged tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../golden_files.h"
#include "backend/backend.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "model/vision_encoder.h"
#include "vision/vision_tower.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kVision = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";

double max_rel_diff(const std::vector<float>& got, const Tensor& ref) {
  EXPECT_EQ(int64_t(got.size()), ref.numel());
  double m = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel() && i < int64_t(got.size()); ++i) {
    m = std::max(m, double(std::abs(got[size_t(i)] - ref.ptr<float>()[i])));
    scale = std::max(scale, double(std::abs(ref.ptr<float>()[i])));
  }
  return m / scale;
}

TEST(VisionTower, EncoderAndMergerMatchTransformers) {
  const fs::path model = kVision / "model";
  const VisionConfig cfg = vision_config_read(model.string());
  EXPECT_EQ(cfg.depth, 2);
  EXPECT_EQ(cfg.out_hidden, 64);
  const CheckpointReader ckpt(model.string());
  const VisionWeights w = vision_weights_load(ckpt, cfg);
  const ImageProcessorConfig pcfg = image_processor_config_read(model.string());
  const auto meta = testing_goldens::read_json(kVision / "processor_golden.json");
  const SafetensorsFile golden((kVision / "model_golden.safetensors").string());
  for (size_t i = 0; i < meta["images"].size(); ++i) {
    const std::string file = meta["images"][i]["file"].get<std::string>();
    SCOPED_TRACE(file);
    const ProcessedImage p = image_preprocess(image_decode_file((kVision / file).string()), pcfg, file);
    const VisionOutput out = vision_forward(w, p.pixel_values, {{p.grid_t, p.grid_h, p.grid_w}});
    const double hidden = max_rel_diff(out.hidden, golden.get("vision_hidden_" + std::to_string(i)));
    const double embeds = max_rel_diff(out.embeds, golden.get("image_embeds_" + std::to_string(i)));
    EXPECT_LE(hidden, 1e-5);
    EXPECT_LE(embeds, 1e-5);
    std::printf("%s: %lld tokens, rel diff hidden %.2e, merged %.2e\n", file.c_str(),
                (long long)p.merged_tokens(pcfg.merge_size), hidden, embeds);
  }
}

TEST(VisionTower, ImagesBatchedTogetherEqualEachAlone) {
  const fs::path model = kVision / "model";
  const VisionConfig cfg = vision_config_read(model.string());
  const VisionWeights w = vision_weights_load(CheckpointReader(model.string()), cfg);
  const ImageProcessorConfig pcfg = image_processor_config_read(model.string());
  const auto meta = testing_goldens::read_json(kVision / "processor_golden.json");
  std::vector<float> pixels;
  std::vector<std::array<int64_t, 3>> grids;
  std::vector<float> alone;
  for (size_t i : {size_t(2), size_t(5)}) {
    const std::string file = meta["images"][i]["file"].get<std::string>();
    const ProcessedImage p = image_preprocess(image_decode_file((kVision / file).string()), pcfg, file);
    pixels.insert(pixels.end(), p.pixel_values.begin(), p.pixel_values.end());
    grids.push_back({p.grid_t, p.grid_h, p.grid_w});
    const auto e = vision_forward(w, p.pixel_values, {grids.back()}).embeds;
    alone.insert(alone.end(), e.begin(), e.end());
  }
  const auto both = vision_forward(w, pixels, grids).embeds;
  ASSERT_EQ(both.size(), alone.size());
  for (size_t k = 0; k < both.size(); ++k) ASSERT_EQ(both[k], alone[k]) << k;
}

// The tower through backend ops (VisionEncoder on the CPU backend, fp32, keeping its activations as for a vision
// LoRA backward: the frozen tower on the CPU takes the host reference above) with all six images in one call
// (full attention within each image): each image's merged tokens against transformers' as above.
TEST(VisionTower, BackendOpsTowerMatchesTransformers) {
  const fs::path model = kVision / "model";
  const VisionConfig cfg = vision_config_read(model.string());
  auto w = std::make_shared<VisionWeights>(vision_weights_load(CheckpointReader(model.string()), cfg));
  const ImageProcessorConfig pcfg = image_processor_config_read(model.string());
  const auto meta = testing_goldens::read_json(kVision / "processor_golden.json");
  const SafetensorsFile golden((kVision / "model_golden.safetensors").string());
  std::vector<float> pixels;
  std::vector<std::array<int64_t, 3>> grids;
  for (size_t i = 0; i < meta["images"].size(); ++i) {
    const std::string file = meta["images"][i]["file"].get<std::string>();
    const ProcessedImage p = image_preprocess(image_decode_file((kVision / file).string()), pcfg, file);
    pixels.insert(pixels.end(), p.pixel_values.begin(), p.pixel_values.end());
    grids.push_back({p.grid_t, p.grid_h, p.grid_w});
  }
  auto be = make_cpu_backend(2);
  VisionEncoder tower(*be, w);
  VisionEncoder::Saved saved;
  const Tensor out = be->download(tower.forward(pixels, grids, nullptr, LoraRuntime{}, &saved), DType::F32);
  ASSERT_EQ(out.cols(), cfg.out_hidden);
  int64_t row = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const Tensor ref = golden.get("image_embeds_" + std::to_string(i));
    const int64_t n = ref.numel();
    ASSERT_LE((row * cfg.out_hidden) + n, out.numel());
    const std::vector<float> got(out.ptr<float>() + row * cfg.out_hidden, out.ptr<float>() + row * cfg.out_hidden + n);
    const double rel = max_rel_diff(got, ref);
    EXPECT_LE(rel, 1e-5) << "image " << i;
    std::printf("image %zu through backend ops: rel diff merged %.2e\n", i, rel);
    row += n / cfg.out_hidden;
  }
  EXPECT_EQ(row, out.rows());
}

TEST(VisionTower, MissingTensorNamesCheckpointAndKey) {
  const fs::path model = kVision / "model";
  VisionConfig cfg = vision_config_read(model.string());
  cfg.depth = 3;  // the checkpoint has 2 blocks
  try {
    vision_weights_load(CheckpointReader(model.string()), cfg);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("`model.visual.blocks.2.norm1.weight` is missing"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace deltatune
