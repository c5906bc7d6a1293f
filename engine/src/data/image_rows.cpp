#include "data/image_rows.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/tokenizer.h"
#include "vision/image_decode.h"

namespace deltatune {

std::optional<VisionDataConfig> vision_data_config_read(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "config.json", ec)) return std::nullopt;
  VisionDataConfig c;
  try {
    c.vision = vision_config_read(model_dir);
  } catch (const Error& e) {
    if (std::string(e.what()).find("no vision_config") != std::string::npos) return std::nullopt;
    c.unusable = e.what();
    return c;
  }
  try {
    check(std::filesystem::exists(dir / "preprocessor_config.json", ec),
          (dir / "preprocessor_config.json").string() +
              ": not found (a vision-language checkpoint needs it to preprocess images)");
    c.processor = image_processor_config_read(model_dir);
    check(c.processor.merge_size == c.vision.merge_size && c.processor.patch_size == c.vision.patch_size &&
              c.processor.temporal_patch_size == c.vision.temporal_patch_size,
          (dir / "preprocessor_config.json").string() +
              ": patch_size, temporal_patch_size and merge_size differ from config.json's vision_config");
  } catch (const Error& e) {
    c.unusable = e.what();
  }
  return c;
}

std::string vision_data_config_hash(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::string h;
  for (const char* f : {"config.json", "preprocessor_config.json"}) {
    std::error_code ec;
    h += std::filesystem::exists(dir / f, ec) ? hash_file_hex((dir / f).string()) : std::string("-");
  }
  return hash_bytes_hex(h);
}

void vision_require(const VisionDataConfig* vision, const std::string& source) {
  check(vision != nullptr,
        source + ": the row has images, but the checkpoint is text-only (config.json has no vision_config)");
  check(vision->unusable.empty(), source + ": the row has images, but they cannot be used: " + vision->unusable);
}

void example_expand_images(Example& ex, const std::vector<std::string>& paths, const VisionDataConfig* vision,
                           const std::string& source) {
  vision_require(vision, source);
  const VisionDataConfig& cfg = *vision;
  const auto image_token = static_cast<int32_t>(cfg.vision.image_token_id);
  const auto start = static_cast<int32_t>(cfg.vision.vision_start_token_id);
  const auto end = static_cast<int32_t>(cfg.vision.vision_end_token_id);
  size_t placeholders = 0;
  for (int32_t id : ex.input_ids) placeholders += id == image_token;
  check(placeholders == paths.size(), source + ": the chat template rendered " + std::to_string(placeholders) +
                                          " image placeholders for " + std::to_string(paths.size()) + " images");
  const int64_t factor = cfg.processor.patch_size * cfg.processor.merge_size;
  std::vector<int64_t> tokens;
  ex.images.clear();
  for (const std::string& path : paths) {
    const std::string name = source + ": image " + path;
    const RgbImage img = image_decode_file(path);
    std::array<int64_t, 2> hw{img.height, img.width};
    if (cfg.processor.do_resize)
      hw = smart_resize(img.height, img.width, factor, cfg.processor.min_pixels, cfg.processor.max_pixels, name);
    check(hw[0] % factor == 0 && hw[1] % factor == 0,
          name + ": size " + std::to_string(hw[1]) + "x" + std::to_string(hw[0]) +
              " is not a multiple of patch x merge (" + std::to_string(factor) + ")");
    Example::Image im{path, {1, hw[0] / cfg.processor.patch_size, hw[1] / cfg.processor.patch_size}};
    tokens.push_back(im.grid[0] * im.grid[1] * im.grid[2] / (cfg.processor.merge_size * cfg.processor.merge_size));
    ex.images.push_back(std::move(im));
  }
  std::vector<int32_t> ids, labels;
  size_t image = 0;
  for (size_t t = 0; t < ex.input_ids.size(); ++t) {
    const int32_t id = ex.input_ids[t];
    if (id == image_token) {
      ids.insert(ids.end(), size_t(tokens[image++]), image_token);
      labels.insert(labels.end(), size_t(tokens[image - 1]), -100);
      continue;
    }
    ids.push_back(id);
    labels.push_back(id == start || id == end ? -100 : ex.labels[t]);
  }
  ex.input_ids = std::move(ids);
  ex.labels = std::move(labels);
}

void example_truncate(Example& ex, size_t len, int32_t image_token_id, int32_t vision_start_token_id) {
  if (ex.input_ids.size() <= len) return;
  size_t cut = len, kept = 0;
  for (size_t t = 0; t < ex.input_ids.size() && kept < ex.images.size(); ++t) {
    if (ex.input_ids[t] != image_token_id || (t > 0 && ex.input_ids[t - 1] == image_token_id)) continue;
    size_t run_end = t;
    while (run_end < ex.input_ids.size() && ex.input_ids[run_end] == image_token_id) ++run_end;
    if (run_end > len) {  // this image does not fit: end before it (and its vision-start token)
      cut = t > 0 && ex.input_ids[t - 1] == vision_start_token_id ? t - 1 : t;
      break;
    }
    ++kept;
  }
  ex.images.resize(kept);
  ex.input_ids.resize(std::min(cut, len));
  ex.labels.resize(ex.input_ids.size());
}

}  // namespace deltatune
