// Tokenized examples and packed micro-batches: the hand-off from the data pipeline to the trainer.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

// One training example. labels are aligned with input_ids (NOT shifted): labels[t] = input_ids[t] where
// token t is trained, -100 where it is not. Token t is predicted from tokens < t.
struct Example {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
  // Chat rows with image parts: each image (file path, patch grid (t, h, w)) in the order of its run of image
  // tokens in input_ids. Its pixels are read when a batch with it is trained on (data/batch_images.h).
  struct Image {
    std::string path;
    std::array<int64_t, 3> grid{};
  };
  std::vector<Image> images;
};

// A micro-batch: whole sequences concatenated (packed rows and padded batches alike are described this
// way: padding never needs to be computed). targets are already shifted within each sequence:
// targets[t] = labels[t+1] of the same sequence, -100 at each sequence's last token.
struct Batch {
  std::vector<int32_t> input_ids;   // [T]
  std::vector<int32_t> targets;     // [T]
  std::vector<int32_t> positions;   // [T] position within its sequence
  std::vector<int32_t> cu_seqlens;  // [N+1]
  int64_t num_targets = 0;          // targets != -100
  int64_t rows = 0;                 // packed rows (or examples when not packing) it came from
  // Images of a vision-language batch; all empty for text-only batches. batch_from_examples copies the examples'
  // images (token order); batch_load_images (data/batch_images.h) reads their pixels and positions.
  std::vector<Example::Image> images;
  std::vector<float> pixel_values;                  // the images' patch rows back to back, token order
  std::vector<std::array<int64_t, 3>> image_grids;  // (t, h, w) patch grid of each image, token order
  std::vector<int32_t> mrope_positions;             // [3, T] row-major: temporal, height, width positions
};

// Builds a Batch from whole examples (each its own sequence).
Batch batch_from_examples(const std::vector<const Example*>& examples);

}  // namespace deltatune
