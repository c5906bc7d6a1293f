#include "model/model_info_vision.h"

#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace deltatune {

namespace {

// transformers' Qwen3_5VisionModel: patch_embed (Conv3d with bias), pos_embed table, `depth` blocks (two
// LayerNorms, qkv, proj, fc1, fc2, all with bias), merger (LayerNorm over hidden, fc1 m²H -> m²H, fc2 m²H -> out).
int64_t vision_params_from_sizes(const VisionConfig& c) {
  const int64_t H = c.hidden, I = c.intermediate, M = c.merge_size * c.merge_size * H;
  const int64_t block = 2 * 2 * H + (3 * H * H + 3 * H) + (H * H + H) + (I * H + I) + (H * I + H);
  return (H * c.patch_features() + H) + c.num_position_embeddings * H + c.depth * block + 2 * H + (M * M + M) +
         (c.out_hidden * M + c.out_hidden);
}

}  // namespace

void model_info_fill_vision(const std::string& dir, const CheckpointReader* reader, ModelInfo* info,
                            const std::string& config_json) {
  VisionTowerInfo& v = info->vision;
  VisionConfig c;
  try {
    c = vision_config_read(config_json.empty() ? dir : config_json);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("no vision_config") != std::string::npos) return;  // a text-only checkpoint
    v.present = true;
    v.unusable = what;
    info->warnings.push_back("vision tower: " + what);
    return;
  }
  v.present = true;
  v.depth = c.depth;
  v.hidden = c.hidden;
  v.heads = c.heads;
  v.intermediate = c.intermediate;
  v.out_hidden = c.out_hidden;
  v.patch_size = c.patch_size;
  v.temporal_patch_size = c.temporal_patch_size;
  v.merge_size = c.merge_size;
  v.num_position_embeddings = c.num_position_embeddings;
  v.params_from_config = vision_params_from_sizes(c);
  v.params = v.params_from_config;
  if (reader) {
    int64_t n = 0;
    for (const std::string& name : reader->names()) {
      if (name.rfind("model.visual.", 0) != 0 && name.rfind("visual.", 0) != 0) continue;
      int64_t k = 1;
      for (int64_t s : reader->entry(name).shape) k *= s;
      n += k;
    }
    v.params = n;
    if (n == 0) info->warnings.push_back("vision tower: config.json has a vision_config but the checkpoint has no "
                                         "visual.* tensors (image rows cannot be trained)");
  }
  const ImageProcessorConfig defaults;
  v.min_pixels = defaults.min_pixels;
  v.max_pixels = defaults.max_pixels;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "preprocessor_config.json", ec)) {
    if (!reader) return;  // a config.json alone, for planning: HF's defaults
    v.unusable = (std::filesystem::path(dir) / "preprocessor_config.json").string() +
                 ": not found (a vision-language checkpoint needs it to preprocess images)";
    return;
  }
  try {
    const ImageProcessorConfig p = image_processor_config_read(dir);
    v.min_pixels = p.min_pixels;
    v.max_pixels = p.max_pixels;
  } catch (const Error& e) {
    v.unusable = e.what();
    info->warnings.push_back(std::string("vision tower: ") + e.what());
  }
}

int64_t image_tokens_for_pixels(const ModelInfo& info, int64_t pixels) {
  const VisionTowerInfo& v = info.vision;
  if (!v.present || v.patch_size <= 0 || v.merge_size <= 0) return 0;
  const int64_t side = v.patch_size * v.merge_size;
  return (pixels > 0 ? pixels : v.max_pixels) / (side * side);
}

}  // namespace deltatune
