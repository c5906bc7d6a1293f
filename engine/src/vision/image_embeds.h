// Early fusion of a vision-language batch: the vision tower's merged tokens replace the embedding rows of the
// batch's image tokens (transformers' Qwen3_5Model.forward: inputs_embeds.masked_scatter(image_mask, ...)).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "vision/vision_tower.h"

namespace deltatune {

// x [T, H] (compute dtype, on `be`): rows t with input_ids[t] == image_token_id (=) the merged tokens of the
// images (`pixel_values` of all images back to back, `grids` their (t, h, w)), in order. The tower runs on the
// host in fp32 (frozen). Throws when the image tokens and the images' merged tokens differ in number, or the
// merger's width is not the text model's hidden size.
void image_embeds_insert(Backend& be, const VisionWeights& vision, const std::vector<int32_t>& input_ids,
                         const std::vector<float>& pixel_values, const std::vector<std::array<int64_t, 3>>& grids,
                         Tensor& x);

}  // namespace deltatune
