// Qwen3.5's image processor (transformers' Qwen2VLImageProcessor, which Qwen3.5's preprocessor_config.json
// names): smart resize to a multiple of patch·merge within [min_pixels, max_pixels], PIL's bicubic resample
// on the 8-bit image, rescale and normalize in fp32, the frame repeated to the temporal patch, and the
// patches flattened in HF's order:
//   rows    (t, h / merge, w / merge, merge_y, merge_x)   -> grid_t·grid_h·grid_w rows
//   columns (channel, temporal, patch_y, patch_x)         -> 3·temporal·patch·patch values
// so each run of merge² rows is one merged token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "vision/image_decode.h"

namespace deltatune {

struct ImageProcessorConfig {
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  int64_t min_pixels = 56 * 56;          // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;   // size.longest_edge
  double rescale_factor = 1.0 / 255.0;
  std::array<float, 3> image_mean{0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN, HF's default
  std::array<float, 3> image_std{0.26862954f, 0.26130258f, 0.27577711f};
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
};

// Reads <model_dir>/preprocessor_config.json (size.shortest_edge/longest_edge or min_pixels/max_pixels,
// patch_size, temporal_patch_size, merge_size, rescale_factor, image_mean, image_std, do_*). A key it does not
// have keeps HF's class default. Throws naming the file when it is missing or a value has the wrong type,
// or when resample is not bicubic (3), the only filter implemented.
ImageProcessorConfig image_processor_config_read(const std::string& model_dir);

// HF's smart_resize: (height, width) rounded to multiples of `factor` (Python's round: half to even),
// scaled down into max_pixels / up into min_pixels keeping the aspect ratio. Throws when a side is smaller
// than factor or the aspect ratio is above 200, as HF does; `name` is what the error calls the image.
std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels, const std::string& name);

// PIL's Image.resize(..., BICUBIC) of an 8-bit RGB image (libImaging/Resample.c: a = -0.5 cubic with a
// support widened by the scale when shrinking, coefficients in 22-bit fixed point, horizontal pass then
// vertical, each rounded and clipped to 8 bits).
RgbImage image_resize_bicubic(const RgbImage& in, int64_t out_width, int64_t out_height);

struct ProcessedImage {
  std::vector<float> pixel_values;  // (grid_t·grid_h·grid_w, 3·temporal·patch·patch)
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
  int64_t rows() const { return grid_t * grid_h * grid_w; }
  int64_t merged_tokens(int64_t merge_size) const { return rows() / (merge_size * merge_size); }
};

ProcessedImage image_preprocess(const RgbImage& image, const ImageProcessorConfig& cfg, const std::string& name);

}  // namespace deltatune
