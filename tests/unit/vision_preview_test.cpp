// What the studio and the CLI show about image rows and the vision tower, on the tiny vision-language checkpoint
// of tests/goldens/vision (reference values from transformers: processor_golden.json / chat_golden.jsonl, the
// checkpoint's own visual.* tensors):
// - the Data page preview: each example's images with HF's patch grid and token count, a thumbnail of the decoded
//   image, the token ids HF's processor gives, image pads collapsed to one "<|image_pad|> x N" entry;
// - a bad image names file and row (the preview shows it with skip_bad_rows, else the preview stops);
// - data statistics count images and image tokens per micro-batch;
// - ModelInfo's vision tower and the memory estimate's image term; `deltatune info` / `prepare --preview`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deltatune/data_preview.h"
#include "deltatune/error.h"
#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"
#include "deltatune/run_config.h"
#include "io/model_config.h"
#include "lora/lora.h"
#include "vision/image_decode.h"
#include "cli_run.h"
#include "vision_test_files.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using namespace testing_vision;

// The CLI's output, its exit status in *rc.
std::string run_cli(const std::string& args, int* rc) {
  const testing_cli::CliResult r = testing_cli::run_cli(args);
  *rc = r.rc;
  return r.out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

class VisionPreview : public VisionScratch {
 protected:
  VisionPreview() : VisionScratch("vision_preview_") {}
  // chat_rows.jsonl (its file:// placeholder pointing at the goldens), in `dir` next to a copy of the images.
  std::string golden_rows() {
    fs::copy(kVision / "images", dir / "images");
    std::ofstream(dir / "rows.jsonl") << golden_rows_text();
    return (dir / "rows.jsonl").string();
  }
};

TEST_F(VisionPreview, ExamplesShowImagesAsTheProcessorSizesThem) {
  const DataPreview p = preview_data(config(golden_rows()), 10);
  const auto golden = read_json_lines(kVision / "chat_golden.jsonl");
  ASSERT_EQ(p.examples.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    const PreviewExample& ex = p.examples[i];
    SCOPED_TRACE(ex.source);
    EXPECT_TRUE(ex.error.empty()) << ex.error;
    std::vector<int32_t> ids;
    for (const PreviewToken& t : ex.tokens) ids.push_back(t.id);
    EXPECT_EQ(ids, golden[i]["input_ids"].get<std::vector<int32_t>>());
    const auto grids = golden[i]["image_grid_thw"];
    ASSERT_EQ(ex.images.size(), grids.size());
    int64_t image_tokens = 0;
    for (const PreviewToken& t : ex.tokens) image_tokens += t.image;
    int64_t expected_tokens = 0;
    for (size_t k = 0; k < grids.size(); ++k) {
      const PreviewImage& im = ex.images[k];
      const auto g = grids[k].get<std::array<int64_t, 3>>();
      EXPECT_EQ((std::array<int64_t, 3>{im.grid_t, im.grid_h, im.grid_w}), g);
      EXPECT_EQ(im.patches, g[0] * g[1] * g[2]);
      EXPECT_EQ(im.tokens, g[0] * g[1] * g[2] / 4);  // merge 2x2
      EXPECT_EQ(im.resized_height, g[1] * 16);
      EXPECT_EQ(im.resized_width, g[2] * 16);
      expected_tokens += im.tokens;
      // The thumbnail is the decoded image (these are all smaller than the thumbnail side).
      const RgbImage decoded = image_decode_file(im.path);
      EXPECT_EQ(im.width, decoded.width);
      EXPECT_EQ(im.height, decoded.height);
      EXPECT_EQ(im.thumbnail_width, decoded.width);
      EXPECT_EQ(im.thumbnail_height, decoded.height);
      EXPECT_EQ(im.thumbnail_rgb, decoded.rgb);
    }
    EXPECT_EQ(image_tokens, expected_tokens);
  }
  // The file names in the golden list are the images' own: width and height as HF read them.
  const auto processor = nlohmann::json::parse(read_file(kVision / "processor_golden.json"));
  for (const auto& im : processor["images"]) {
    const std::string name = fs::path(im["file"].get<std::string>()).filename().string();
    for (const PreviewExample& ex : p.examples)
      for (const PreviewImage& pi : ex.images)
        if (fs::path(pi.path).filename() == name) {
          EXPECT_EQ(pi.width, im["width"].get<int64_t>()) << name;
          EXPECT_EQ(pi.height, im["height"].get<int64_t>()) << name;
        }
  }
}

TEST_F(VisionPreview, ImagePadRunsAreOneEntry) {
  const DataPreview p = preview_data(config(golden_rows()), 10);
  for (const PreviewExample& ex : p.examples) {
    SCOPED_TRACE(ex.source);
    const std::vector<PreviewTokenRun> runs = preview_token_runs(ex);
    size_t image_runs = 0;
    int64_t covered = 0;
    for (const PreviewTokenRun& r : runs) {
      covered += r.count;
      if (ex.tokens[r.first].image) {
        EXPECT_EQ(r.count, ex.images[image_runs].tokens);
        ++image_runs;
      } else {
        EXPECT_EQ(r.count, 1);
      }
    }
    EXPECT_EQ(image_runs, ex.images.size());
    EXPECT_EQ(covered, static_cast<int64_t>(ex.tokens.size()));
    const std::string text = preview_example_text(ex);
    EXPECT_EQ(count_of(text, "<|image_pad|>"), ex.images.size()) << text;
    for (const PreviewImage& im : ex.images)
      EXPECT_NE(text.find("<|image_pad|> x " + std::to_string(im.tokens)), std::string::npos) << text;
  }
}

TEST_F(VisionPreview, BadImageNamesFileAndRow) {
  golden_rows();
  const std::string good = read_file(dir / "rows.jsonl");
  std::ofstream(dir / "bad.jsonl")
      << good.substr(0, good.find('\n') + 1)
      << R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "images/missing.png"}, )"
         R"({"type": "text", "text": "What is it?"}]}, {"role": "assistant", "content": "Nothing."}]})"
      << "\n";
  RunConfig cfg = config((dir / "bad.jsonl").string());
  try {
    preview_data(cfg, 10);
    FAIL() << "a missing image without skip_bad_rows must stop the preview";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.jsonl:2"), std::string::npos) << what;
    EXPECT_NE(what.find("missing.png"), std::string::npos) << what;
  }
  cfg.skip_bad_rows = true;
  const DataPreview p = preview_data(cfg, 10);
  ASSERT_EQ(p.examples.size(), 2u);
  EXPECT_TRUE(p.examples[0].error.empty());
  const PreviewExample& bad = p.examples[1];
  ASSERT_EQ(bad.images.size(), 1u);
  EXPECT_NE(bad.error.find("bad.jsonl:2"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("missing.png"), std::string::npos) << bad.error;
  EXPECT_EQ(bad.images[0].error, bad.error);
  EXPECT_TRUE(bad.images[0].thumbnail_rgb.empty());
  EXPECT_EQ(p.stats.examples, 1);
  EXPECT_EQ(p.stats.skipped_bad_rows, 1);
}

TEST_F(VisionPreview, StatsCountImageTokensPerMicroBatch) {
  const auto golden = read_json_lines(kVision / "chat_golden.jsonl");
  std::vector<int64_t> per_row;
  int64_t images = 0;
  for (const auto& row : golden) {
    int64_t n = 0;
    for (const auto& g : row["image_grid_thw"]) n += g[0].get<int64_t>() * g[1].get<int64_t>() * g[2].get<int64_t>() / 4;
    per_row.push_back(n);
    images += static_cast<int64_t>(row["image_grid_thw"].size());
  }
  RunConfig cfg = config(golden_rows());
  cfg.micro_batch_size = 1;
  const DataStats one = preview_data(cfg, 0).stats;
  EXPECT_EQ(one.images, images);
  int64_t total = 0;
  for (int64_t n : per_row) total += n;
  EXPECT_EQ(one.image_tokens, total);
  EXPECT_EQ(one.max_image_tokens_per_step, *std::max_element(per_row.begin(), per_row.end()));
  cfg.micro_batch_size = static_cast<int64_t>(golden.size());  // every row in one micro-batch
  cfg.dataset_prepared_path = (dir / "cache2").string();
  EXPECT_EQ(preview_data(cfg, 0).stats.max_image_tokens_per_step, total);
}

TEST(VisionModelInfo, TowerSizesAndParameters) {
  const ModelInfo info = model_info_load(kModel.string());
  const VisionTowerInfo& v = info.vision;
  ASSERT_TRUE(v.present);
  EXPECT_TRUE(v.unusable.empty()) << v.unusable;
  const auto cfg = nlohmann::json::parse(read_file(kModel / "config.json"))["vision_config"];
  EXPECT_EQ(v.depth, cfg["depth"].get<int64_t>());
  EXPECT_EQ(v.hidden, cfg["hidden_size"].get<int64_t>());
  EXPECT_EQ(v.patch_size, cfg["patch_size"].get<int64_t>());
  EXPECT_EQ(v.merge_size, cfg["spatial_merge_size"].get<int64_t>());
  EXPECT_EQ(v.out_hidden, cfg["out_hidden_size"].get<int64_t>());
  // The checkpoint (written by transformers) holds exactly the tensors the sizes imply.
  EXPECT_GT(v.params, 0);
  EXPECT_EQ(v.params, v.params_from_config);
  const ModelInfo planned = model_info_from_config((kModel / "config.json").string());
  EXPECT_EQ(planned.vision.params, v.params);
  const auto pre = nlohmann::json::parse(read_file(kModel / "preprocessor_config.json"));
  EXPECT_EQ(v.max_pixels, pre["size"]["longest_edge"].get<int64_t>());
  EXPECT_EQ(v.min_pixels, pre["size"]["shortest_edge"].get<int64_t>());
  const int64_t side = v.patch_size * v.merge_size;
  EXPECT_EQ(image_tokens_for_pixels(info), v.max_pixels / (side * side));
  EXPECT_EQ(image_tokens_for_pixels(info, 512 * 512), 512 * 512 / (side * side));
  // A text-only checkpoint has none.
  const ModelInfo text = model_info_load((fs::path(DT_SOURCE_DIR) / "resources" / "demo" / "model").string());
  EXPECT_FALSE(text.vision.present);
  EXPECT_EQ(image_tokens_for_pixels(text), 0);
}

TEST(VisionModelInfo, EstimateGrowsWithImageTokens) {
  const ModelInfo info = model_info_load(kModel.string());
  const int64_t T = 1024;
  const VramEstimate none = estimate_vram(info, 16, T, true, false);
  EXPECT_EQ(none.vision_weights, 0);
  EXPECT_EQ(none.vision_activations, 0);
  const VramEstimate a = estimate_vram(info, 16, T, true, false, -1, "none", 1024, ImageLoad{100});
  const VramEstimate b = estimate_vram(info, 16, T, true, false, -1, "none", 1024, ImageLoad{200});
  EXPECT_EQ(a.vision_weights, 2 * info.vision.params);
  EXPECT_GT(a.vision_activations, 0);
  EXPECT_EQ(b.vision_activations, 2 * a.vision_activations);  // linear in the patches
  EXPECT_GT(a.total, none.total);
  EXPECT_GT(b.total, a.total);
  EXPECT_EQ(a.total, none.total + a.vision_weights + a.vision_activations);
  // Training the tower (the `vision` group on top of the defaults) keeps every block's activations and adds the
  // group's LoRA pairs (16 bytes a parameter: fp32 weight, gradient, Adam m and v) to LoRA + optimizer.
  std::vector<std::string> groups = lora_default_groups(info);
  groups.push_back("vision");
  const VramEstimate lora = estimate_vram(info, 16, T, true, false, -1, "none", 1024, ImageLoad{100}, groups);
  EXPECT_GT(lora.vision_activations, a.vision_activations);
  EXPECT_EQ(lora.vision_weights, a.vision_weights);
  EXPECT_EQ(lora.lora_and_optimizer - a.lora_and_optimizer, 16 * lora_params_per_group(info, 16).at("vision"));
  // The memory plan gets the same term.
  MemoryPlanRequest req;
  req.tokens_per_step = T;
  req.free_bytes = int64_t(80) << 30;
  const MemoryPlan plain = plan_memory(info, req);
  req.images = ImageLoad{200};
  const MemoryPlan with = plan_memory(info, req);
  EXPECT_EQ(with.estimate.total - plain.estimate.total, b.vision_weights + b.vision_activations);
}

// The `vision` group: listed by the model info, sized as the trainer's inventory of LoRA modules sizes it, and off
// by default (one rule for the estimate, the shard plan and the trainer).
TEST(VisionModelInfo, VisionLoraGroup) {
  const ModelInfo info = model_info_load(kModel.string());
  const ModelConfig cfg = model_config_load((kModel / "config.json").string());
  EXPECT_EQ(info.lora_groups, lora_groups_of(cfg));
  ASSERT_NE(std::find(info.lora_groups.begin(), info.lora_groups.end(), "vision"), info.lora_groups.end());
  for (int r : {1, 8, 16}) {
    int64_t want = 0;
    for (const LoraModule& m : lora_inventory(cfg))
      if (m.group == "vision") want += int64_t{r} * (m.in + m.out);
    EXPECT_GT(want, 0);
    EXPECT_EQ(lora_params_per_group(info, r).at("vision"), want) << "r=" << r;
  }
  EXPECT_EQ(lora_default_groups(info), lora_default_groups(cfg));
  EXPECT_FALSE(lora_group_is_default("vision"));
  EXPECT_FALSE(lora_group_is_default("experts"));
  // The default estimate leaves the tower's LoRA out; naming the group puts it in.
  std::vector<std::string> with_vision = lora_default_groups(info);
  with_vision.push_back("vision");
  const VramEstimate plain = estimate_vram(info, 8, 512, true, false);
  const VramEstimate vision = estimate_vram(info, 8, 512, true, false, -1, "none", 1024, {}, with_vision);
  EXPECT_EQ(vision.lora_and_optimizer - plain.lora_and_optimizer, 16 * lora_params_per_group(info, 8).at("vision"));
  EXPECT_EQ(plain.total, estimate_vram(info, 8, 512, true, false, -1, "none", 1024, {}, lora_default_groups(info)).total);
  // A text-only checkpoint has no `vision` entry.
  const ModelInfo text = model_info_load((fs::path(DT_SOURCE_DIR) / "resources" / "demo" / "model").string());
  EXPECT_EQ(lora_params_per_group(text, 8).count("vision"), 0u);
  EXPECT_EQ(std::count(text.lora_groups.begin(), text.lora_groups.end(), "vision"), 0);
}

TEST_F(VisionPreview, CliInfoAndPreparePreview) {
  int rc = -1;
  const std::string text = run_cli("info --model " + kModel.string() + " --no-gradient-checkpointing", &rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("vision tower: 2 blocks, hidden 32"), std::string::npos) << text;
  const std::string js =
      run_cli("info --model " + kModel.string() + " --no-gradient-checkpointing --json --tokens 512", &rc);
  ASSERT_EQ(rc, 0) << js;
  const auto j0 = nlohmann::json::parse(js);
  EXPECT_EQ(j0["vision"]["depth"].get<int64_t>(), 2);
  EXPECT_EQ(j0["vram_estimate"]["vision_activations"].get<int64_t>(), 0);
  const auto j1 = nlohmann::json::parse(
      run_cli("info --model " + kModel.string() + " --no-gradient-checkpointing --json --tokens 512 --images 2", &rc));
  const int64_t per_image = j1["vision"]["image_tokens_at_max_pixels"].get<int64_t>();
  EXPECT_EQ(j1["vram_estimate"]["image_tokens_per_step"].get<int64_t>(), 2 * per_image);
  EXPECT_GT(j1["vram_estimate"]["vision_activations"].get<int64_t>(), 0);
  EXPECT_GT(j1["vram_estimate"]["total"].get<int64_t>(), j0["vram_estimate"]["total"].get<int64_t>());
  const std::string too_many =
      run_cli("info --model " + kModel.string() + " --no-gradient-checkpointing --tokens 8 --image-tokens 9", &rc);
  EXPECT_EQ(rc, 1) << too_many;
  EXPECT_NE(too_many.find("--tokens 8"), std::string::npos) << too_many;

  const std::string rows = golden_rows();
  std::ofstream(dir / "run.yaml") << "base_model: " << kModel.string() << "\ndatasets:\n  - path: " << rows
                                  << "\nsequence_len: 256\nval_set_size: 0\noutput_dir: " << (dir / "out").string()
                                  << "\ndataset_prepared_path: " << (dir / "cache").string() << "\n";
  const std::string prep = run_cli("prepare " + (dir / "run.yaml").string() + " --preview 3", &rc);
  EXPECT_EQ(rc, 0) << prep;
  const DataPreview p = preview_data(config(rows), 3);
  for (const PreviewExample& ex : p.examples) {
    EXPECT_NE(prep.find(preview_example_text(ex)), std::string::npos) << prep;
    for (const PreviewImage& im : ex.images)
      EXPECT_NE(prep.find(im.path + ": " + std::to_string(im.width) + "x" + std::to_string(im.height)),
                std::string::npos)
          << prep;
  }
  EXPECT_NE(prep.find("train images: " + std::to_string(p.stats.images)), std::string::npos) << prep;
}

}  // namespace
}  // namespace deltatune
