// Multimodal rotary positions against transformers' Qwen3_5Model.get_rope_index (tests/goldens/vision/
// make_model_goldens.py: a 33-token sequence with two images of 4 merged tokens each, 2x2 grids), and the
// expansion of image placeholders as Qwen3VLProcessor does it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../golden_files.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_placeholders.h"
#include "vision/mrope_positions.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kVision = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";

TEST(VisionPositions, MropePositionsMatchTransformers) {
  const SafetensorsFile golden((kVision / "model_golden.safetensors").string());
  const auto proc = testing_goldens::read_json(kVision / "processor_golden.json");
  const auto meta = testing_goldens::read_json(kVision / "model_golden.json");
  const Tensor ids_t = golden.get("input_ids");
  const std::vector<int32_t> ids(ids_t.ptr<int32_t>(), ids_t.ptr<int32_t>() + ids_t.numel());
  std::vector<std::array<int64_t, 3>> grids;
  for (const auto& k : meta["images_in_sequence"]) {
    const auto& g = proc["images"][k.get<size_t>()]["image_grid_thw"];
    grids.push_back({g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()});
  }
  const auto pos = mrope_positions(ids, 250, grids, 2, "golden");
  const Tensor ref = golden.get("position_ids");
  ASSERT_EQ(ref.shape[0], 3);
  ASSERT_EQ(ref.shape[1], int64_t(ids.size()));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t t = 0; t < ref.shape[1]; ++t)
      EXPECT_EQ(pos[size_t(r)][size_t(t)], ref.ptr<int32_t>()[r * ref.shape[1] + t]) << "row " << r << " token " << t;
}

TEST(VisionPositions, TextRotaryTablesMatchTransformers) {
  // The golden model: head_dim 32, partial rotary 0.5, theta 1e4, mrope_section [2, 3, 3] interleaved.
  const SafetensorsFile golden((kVision / "model_golden.safetensors").string());
  const Tensor ref_pos = golden.get("position_ids");
  const int64_t T = ref_pos.shape[1];
  std::array<std::vector<int32_t>, 3> pos;
  for (int64_t r = 0; r < 3; ++r) pos[size_t(r)].assign(ref_pos.ptr<int32_t>() + r * T, ref_pos.ptr<int32_t>() + (r + 1) * T);
  std::vector<float> cos, sin;
  mrope_cos_sin(pos, 16, 10000.0, {2, 3, 3}, cos, sin);
  const Tensor ref_cos = golden.get("text_rope_cos"), ref_sin = golden.get("text_rope_sin");
  ASSERT_EQ(ref_cos.numel(), int64_t(cos.size()));
  double max_diff = 0;
  for (int64_t k = 0; k < ref_cos.numel(); ++k)
    max_diff = std::max({max_diff, double(std::abs(cos[size_t(k)] - ref_cos.ptr<float>()[k])),
                         double(std::abs(sin[size_t(k)] - ref_sin.ptr<float>()[k]))});
  EXPECT_LE(max_diff, 1e-6);  // fp32 on both sides; measured 6.0e-8
  std::printf("mrope cos/sin: %lld tokens, max |diff| %.3g\n", (long long)T, max_diff);
}

TEST(VisionPositions, TextOnlyIsThreeEqualRows) {
  const auto pos = mrope_positions({5, 6, 7}, 250, {}, 2, "row");
  for (const auto& row : pos) EXPECT_EQ(row, (std::vector<int32_t>{0, 1, 2}));
}

TEST(VisionPositions, RunsThatDoNotMatchTheGridsAreNamed) {
  try {
    mrope_positions({1, 250, 250, 250, 2}, 250, {{1, 4, 4}}, 2, "data.jsonl:3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.jsonl:3: image 1 has 3 image tokens, its grid needs 4"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(mrope_positions({1, 2}, 250, {{1, 4, 4}}, 2, "x"), Error);
}

TEST(VisionPlaceholders, EachPadBecomesOnePerMergedToken) {
  const std::string pad = "<|image_pad|>";
  const std::string text = "a<|vision_start|>" + pad + "<|vision_end|>b<|vision_start|>" + pad + "<|vision_end|>";
  EXPECT_EQ(image_placeholders_expand(text, pad, {2, 3}, "r"),
            "a<|vision_start|>" + pad + pad + "<|vision_end|>b<|vision_start|>" + pad + pad + pad + "<|vision_end|>");
  try {
    image_placeholders_expand(text, pad, {2}, "data.jsonl:7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.jsonl:7: the rendered chat has more <|image_pad|> placeholders"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(image_placeholders_expand("no image", pad, {4}, "r"), Error);
}

}  // namespace
}  // namespace deltatune
