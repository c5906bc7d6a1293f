// The image side of tokenizing a chat row for a vision-language checkpoint (as transformers' Qwen3VLProcessor
// does it): each image is decoded and sized to its patch grid, the template's one <|image_pad|> per image
// becomes one token per merged patch, and no image token is ever trained on.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "data/batch.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace deltatune {

// What tokenizing image rows needs from the checkpoint folder.
struct VisionDataConfig {
  ImageProcessorConfig processor;
  VisionConfig vision;
  // Why images cannot be used with this checkpoint ("" when they can): a malformed vision_config or
  // preprocessor_config.json, or none next to the vision_config. Only rows with images fail on it.
  std::string unusable;
};

// The checkpoint's vision settings (config.json vision_config, preprocessor_config.json), or none when
// config.json has no vision_config (a text-only checkpoint).
std::optional<VisionDataConfig> vision_data_config_read(const std::string& model_dir);
// Content hash of the files those settings come from (for the token cache key).
std::string vision_data_config_hash(const std::string& model_dir);

// `ex` holds the tokenized row with one image token per image (in `paths` order). Decodes every image (a
// missing, corrupt, too small or too large image throws naming the file and `source`), expands its token to
// the image's merged patch count, sets the labels of image, vision-start and vision-end tokens to -100, and
// records the images in ex.images.
// Throws naming `source` when `vision` is null (a text-only checkpoint) or unusable.
void vision_require(const VisionDataConfig* vision, const std::string& source);

// Throws as vision_require when `cfg` cannot take images.
void example_expand_images(Example& ex, const std::vector<std::string>& paths, const VisionDataConfig* cfg,
                           const std::string& source);

// Cuts an example to `len` tokens. Images whose tokens would be cut are dropped whole: the example then ends
// before the first such image's vision-start token.
void example_truncate(Example& ex, size_t len, int32_t image_token_id, int32_t vision_start_token_id);

}  // namespace deltatune
