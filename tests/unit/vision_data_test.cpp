// Chat rows with images through the data path, on the tiny vision-language checkpoint of
// tests/goldens/vision (its tokenizer and chat template from make_chat_goldens.py):
// - token ids equal transformers' Qwen3VLProcessor.apply_chat_template (image pads expanded per image);
// - image, vision-start and vision-end tokens are never trained on, even with train_on_inputs;
// - bad images (missing, corrupt, too small) name the file and the row, or are skipped with skip_bad_rows;
// - truncation drops whole images; packed image rows give each row's own loss;
// - `train_run` on image rows (CPU) runs and its loss falls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/pipeline.h"
#include "data/tokenizer.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "data/batch_images.h"
#include "data/image_rows.h"
#include "vision_test_files.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using namespace testing_vision;

class VisionData : public VisionScratch {
 protected:
  VisionData() : VisionScratch("vision_data_") {}
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return (dir / name).string();
  }
  // A dataset of chat rows whose images are the goldens' (absolute paths), one row per (image, answer).
  std::string image_dataset(const std::vector<std::pair<std::string, std::string>>& rows) {
    std::string text;
    for (const auto& [image, answer] : rows) {
      nlohmann::json m = nlohmann::json::array();
      m.push_back({{"role", "user"},
                   {"content", {{{"type", "image"}, {"image", (kVision / "images" / image).string()}},
                                {{"type", "text"}, {"text", "Describe the picture in one sentence."}}}}});
      m.push_back({{"role", "assistant"}, {"content", answer}});
      text += nlohmann::json{{"messages", m}}.dump() + "\n";
    }
    return write("rows.jsonl", text);
  }
};

TEST_F(VisionData, TokenIdsEqualTransformersProcessor) {
  const Tokenizer tok = Tokenizer::from_file(kModel.string());
  const ChatTemplate tpl = ChatTemplate::from_model_dir(kModel.string());
  const auto vision = vision_data_config_read(kModel.string());
  ASSERT_TRUE(vision && vision->unusable.empty());
  const std::string dataset = (kVision / "chat_rows.jsonl").string();
  const DatasetFile file = dataset_parse_text(golden_rows_text(), dataset, "chat", false);
  const auto golden = read_json_lines(kVision / "chat_golden.jsonl");
  ASSERT_EQ(file.rows.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    SCOPED_TRACE(file.rows[i].source);
    for (const bool train_on_inputs : {false, true}) {
      const Example ex = data_encode_row(tok, &tpl, file.rows[i], train_on_inputs, -1, {}, &*vision, dataset);
      EXPECT_EQ(ex.input_ids, golden[i]["input_ids"].get<std::vector<int32_t>>());
      const auto grids = golden[i]["image_grid_thw"];
      ASSERT_EQ(ex.images.size(), grids.size());
      for (size_t k = 0; k < grids.size(); ++k)
        EXPECT_EQ(ex.images[k].grid, (grids[k].get<std::array<int64_t, 3>>()));
      int64_t trained = 0;
      for (size_t t = 0; t < ex.input_ids.size(); ++t) {
        const int32_t id = ex.input_ids[t];
        if (id == vision->vision.image_token_id || id == vision->vision.vision_start_token_id ||
            id == vision->vision.vision_end_token_id)
          EXPECT_EQ(ex.labels[t], -100) << "token " << t;
        trained += ex.labels[t] != -100;
      }
      EXPECT_GT(trained, 0);
    }
  }
}

TEST_F(VisionData, BadImagesNameFileAndRowOrAreSkipped) {
  write("corrupt.png", std::string("\x89PNG\r\n\x1a\n", 8) + "not a png");
  const std::string tiny = (kVision / "images" / "rgb_36x40.png").string();
  std::string text;
  const auto row = [&](const std::string& image) {
    nlohmann::json m = nlohmann::json::array();
    m.push_back({{"role", "user"}, {"content", {{{"type", "image"}, {"image", image}}, {{"type", "text"}, {"text", "Hi"}}}}});
    m.push_back({{"role", "assistant"}, {"content", "The image."}});
    return nlohmann::json{{"messages", m}}.dump() + "\n";
  };
  text += row(tiny) + row("missing.png") + row("corrupt.png") + row(tiny);
  const std::string dataset = write("rows.jsonl", text);
  RunConfig cfg = config(dataset);
  try {
    data_prepare(cfg);
    ADD_FAILURE() << "no error for the missing image";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rows.jsonl:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing.png"), std::string::npos) << msg;
  }
  cfg.skip_bad_rows = true;
  const PreparedData d = data_prepare(cfg);
  EXPECT_EQ(d.train.size(), 2u);
  EXPECT_EQ(d.train_stats.skipped_bad_rows, 2);
  bool first_reason_named = false;
  for (const auto& w : d.warnings) first_reason_named |= w.find("missing.png") != std::string::npos;
  EXPECT_TRUE(first_reason_named);
  for (const Example& ex : d.train) EXPECT_EQ(ex.images.size(), 1u);

  // A text-only checkpoint refuses image rows with the reason.
  cfg.base_model = (fs::path(DT_SOURCE_DIR) / "resources" / "demo" / "model").string();
  cfg.skip_bad_rows = false;
  try {
    data_prepare(cfg);
    ADD_FAILURE() << "no error for images on a text-only checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text-only"), std::string::npos) << e.what();
  }
}

TEST_F(VisionData, TruncationDropsWholeImages) {
  const auto vision = vision_data_config_read(kModel.string());
  const auto golden = read_json_lines(kVision / "chat_golden.jsonl");
  const auto& g = golden[2];  // three images
  Example ex;
  ex.input_ids = g["input_ids"].get<std::vector<int32_t>>();
  ex.labels = ex.input_ids;
  for (const auto& grid : g["image_grid_thw"]) ex.images.push_back({"x.png", grid.get<std::array<int64_t, 3>>()});
  const auto img = int32_t(vision->vision.image_token_id), start = int32_t(vision->vision.vision_start_token_id);
  // Cut inside the second image: the first stays, the row ends before the second's vision-start token.
  size_t second = 0, runs = 0;
  for (size_t t = 0; t < ex.input_ids.size(); ++t)
    if (ex.input_ids[t] == img && ex.input_ids[t - 1] != img && ++runs == 2) second = t;
  ASSERT_GT(second, 0u);
  Example cut = ex;
  example_truncate(cut, second + 1, img, start);
  EXPECT_EQ(cut.images.size(), 1u);
  EXPECT_EQ(cut.input_ids.size(), second - 1);
  EXPECT_EQ(cut.input_ids.back(), vision->vision.vision_end_token_id);
  Example whole = ex;
  example_truncate(whole, ex.input_ids.size() - 1, img, start);  // only text cut
  EXPECT_EQ(whole.images.size(), 3u);
  EXPECT_EQ(whole.input_ids.size(), ex.input_ids.size() - 1);
}

TEST_F(VisionData, PackedImageRowsGiveEachRowsLoss) {
  const auto vision = vision_data_config_read(kModel.string());
  const std::string dataset = (kVision / "chat_rows.jsonl").string();
  const Tokenizer tok = Tokenizer::from_file(kModel.string());
  const ChatTemplate tpl = ChatTemplate::from_model_dir(kModel.string());
  const DatasetFile file = dataset_parse_text(golden_rows_text(), dataset, "chat", false);
  std::vector<Example> exs;
  for (const auto& row : file.rows) exs.push_back(data_encode_row(tok, &tpl, row, false, -1, {}, &*vision, dataset));
  const ModelWeights w = model_weights_load(kModel.string());
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  model.set_vision(std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vision->vision)));
  double alone = 0;
  for (const Example& ex : exs) {
    Batch b = batch_from_examples({&ex});
    batch_load_images(b, *vision);
    alone += model.step(b, nullptr, StepOptions{}).loss_sum;
  }
  Batch packed = batch_from_examples({&exs[0], &exs[1], &exs[2]});
  batch_load_images(packed, *vision);
  EXPECT_EQ(packed.image_grids.size(), 5u);
  const double together = model.step(packed, nullptr, StepOptions{}).loss_sum;
  EXPECT_NEAR(together, alone, 1e-5 * std::abs(alone));
}

struct Losses : RunObserver {
  std::vector<double> losses;
  void on_step(const StepMetrics& m) override { losses.push_back(m.loss); }
};

TEST_F(VisionData, TrainingOnImageRowsLowersTheLoss) {
  const std::string dataset = image_dataset({{"rgb_36x40.png", "A red square."},
                                             {"photo_121x83.jpg", "Three dots on a photo."},
                                             {"gray_97x66.png", "A gray picture."},
                                             {"rgba_130x100.png", "A cat by a window."}});
  RunConfig cfg = config(dataset);
  cfg.output_dir = (dir / "run").string();
  cfg.backend = "cpu";
  cfg.adapter = "lora";
  cfg.lora_r = 8;
  cfg.lora_alpha = 16;
  cfg.lora_target_groups = {"attn", "linear_attn", "mlp"};
  cfg.micro_batch_size = 2;
  cfg.sample_packing = true;
  cfg.max_steps = 30;
  cfg.learning_rate = 1e-2;
  cfg.warmup_steps = 2;
  cfg.eval_steps = 0;
  cfg.save_steps = 0;
  Losses rec;
  RunControl control;
  train_run(cfg, rec, control, TrainOptions{(dir / "db.sqlite").string(), ""});
  ASSERT_EQ(rec.losses.size(), 30u);
  const double first = (rec.losses[0] + rec.losses[1]) / 2;
  const double last = (rec.losses[28] + rec.losses[29]) / 2;
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_TRUE(fs::exists(dir / "run" / "adapter_model.safetensors"));
}

// The `vision` group (off by default) trained through `train_run`: the tower's blocks get LoRA, their gradients
// come back from the text model's image-token rows, the loss falls, and the adapter written at the end holds
// the tower's modules under the vision-language class's model.visual. prefix and reads back.
TEST_F(VisionData, TrainingTheVisionGroupOnImageRows) {
  const std::string dataset = image_dataset({{"rgb_36x40.png", "A red square."},
                                             {"photo_121x83.jpg", "Three dots on a photo."},
                                             {"gray_97x66.png", "A gray picture."},
                                             {"rgba_130x100.png", "A cat by a window."}});
  RunConfig cfg = config(dataset);
  cfg.output_dir = (dir / "run_vision").string();
  cfg.backend = "cpu";
  cfg.adapter = "lora";
  cfg.lora_r = 8;
  cfg.lora_alpha = 16;
  cfg.lora_target_groups = {"vision"};
  cfg.micro_batch_size = 2;
  cfg.sample_packing = true;
  cfg.max_steps = 20;
  cfg.learning_rate = 2e-2;
  cfg.warmup_steps = 2;
  cfg.eval_steps = 0;
  cfg.save_steps = 0;
  Losses rec;
  RunControl control;
  train_run(cfg, rec, control, TrainOptions{(dir / "db.sqlite").string(), ""});
  ASSERT_EQ(rec.losses.size(), 20u);
  const double first = (rec.losses[0] + rec.losses[1]) / 2;
  const double last = (rec.losses[18] + rec.losses[19]) / 2;
  EXPECT_LT(last, first) << "first " << first << " last " << last;
  const fs::path out = dir / "run_vision";
  ASSERT_TRUE(fs::exists(out / "adapter_model.safetensors"));
  const SafetensorsFile f((out / "adapter_model.safetensors").string());
  int tower = 0;
  for (const TensorEntry& e : f.entries()) tower += e.name.rfind("base_model.model.model.visual.blocks.", 0) == 0;
  EXPECT_EQ(tower, int(f.entries().size()));
  const ModelConfig mc = model_config_load((kVision / "model" / "config.json").string());
  const LoraAdapter back = peft_adapter_read(out.string(), mc);
  EXPECT_EQ(back.modules.size(), size_t(2 * 4));  // 2 blocks x qkv, proj, fc1, fc2
  std::printf("vision group: loss %.4f -> %.4f over 20 steps; adapter with %d tower tensors\n", first, last, tower);
}

}  // namespace
}  // namespace deltatune
