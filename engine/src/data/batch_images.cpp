#include "data/batch_images.h"

#include "core/error.h"
#include "vision/image_decode.h"
#include "vision/mrope_positions.h"

namespace deltatune {

void batch_set_images(Batch& batch, const std::vector<const ProcessedImage*>& images, const VisionConfig& cfg,
                      const std::string& source) {
  const size_t T = batch.input_ids.size();
  const auto image_token = static_cast<int32_t>(cfg.image_token_id);
  batch.pixel_values.clear();
  batch.image_grids.clear();
  batch.mrope_positions.assign(3 * T, 0);
  size_t next = 0;
  for (size_t n = 0; n + 1 < batch.cu_seqlens.size(); ++n) {
    const auto b = size_t(batch.cu_seqlens[n]), e = size_t(batch.cu_seqlens[n + 1]);
    const std::vector<int32_t> ids(batch.input_ids.begin() + long(b), batch.input_ids.begin() + long(e));
    size_t runs = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      if (ids[t] == image_token && (t == 0 || ids[t - 1] != image_token)) ++runs;
    check(next + runs <= images.size(), source + ": the batch has more image-token runs than images (" +
                                            std::to_string(images.size()) + ")");
    std::vector<std::array<int64_t, 3>> grids;
    for (size_t i = next; i < next + runs; ++i) {
      const ProcessedImage& im = *images[i];
      grids.push_back({im.grid_t, im.grid_h, im.grid_w});
      batch.pixel_values.insert(batch.pixel_values.end(), im.pixel_values.begin(), im.pixel_values.end());
    }
    next += runs;
    const auto pos = mrope_positions(ids, image_token, grids, cfg.merge_size, source);
    for (size_t r = 0; r < 3; ++r)
      std::copy(pos[r].begin(), pos[r].end(), batch.mrope_positions.begin() + long(r * T + b));
    batch.image_grids.insert(batch.image_grids.end(), grids.begin(), grids.end());
  }
  check(next == images.size(), source + ": " + std::to_string(images.size()) + " images but the batch has " +
                                   std::to_string(next) + " image-token runs");
  if (images.empty()) batch.mrope_positions.clear();
}

void batch_load_images(Batch& batch, const VisionDataConfig& cfg) {
  if (batch.images.empty()) return;
  std::vector<ProcessedImage> images;
  images.reserve(batch.images.size());
  for (const Example::Image& im : batch.images) {
    images.push_back(image_preprocess(image_decode_file(im.path), cfg.processor, im.path));
    const ProcessedImage& p = images.back();
    check(p.grid_t == im.grid[0] && p.grid_h == im.grid[1] && p.grid_w == im.grid[2],
          im.path + ": the image changed after the dataset was tokenized (its patch grid is now " +
              std::to_string(p.grid_h) + "x" + std::to_string(p.grid_w) + ", was " + std::to_string(im.grid[1]) +
              "x" + std::to_string(im.grid[2]) + "); delete the token cache (dataset_prepared_path) to re-tokenize");
  }
  std::vector<const ProcessedImage*> ptrs;
  for (const auto& p : images) ptrs.push_back(&p);
  batch_set_images(batch, ptrs, cfg.vision, "batch");
}

}  // namespace deltatune
