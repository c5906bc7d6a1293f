// The image inputs of a packed batch for a vision-language checkpoint: the images' pixel rows and grids in
// token order and the multimodal RoPE positions of every sequence (each sequence starts at position 0, as
// transformers' get_rope_index gives each row of a padded batch).
#pragma once
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/image_rows.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace deltatune {

// `images`: the processed images of the batch's image-token runs, in token order (sequence by sequence).
// Throws naming `source` when a sequence's image-token runs do not match the images' grids.
void batch_set_images(Batch& batch, const std::vector<const ProcessedImage*>& images, const VisionConfig& cfg,
                      const std::string& source);

// batch_set_images for a batch's own images (batch.images, as batch_from_examples copies them from the
// examples): decodes and preprocesses each file. Throws naming the file when it is unreadable now or no longer
// has the patch grid it was tokenized with (the image changed after the dataset was tokenized). No-op for a
// batch without images.
void batch_load_images(Batch& batch, const VisionDataConfig& cfg);

}  // namespace deltatune
