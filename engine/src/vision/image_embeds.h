// Early fusion of a vision-language batch: the vision tower's merged tokens replace the embedding rows of the
// batch's image tokens (transformers' Qwen3_5Model.forward: inputs_embeds.masked_scatter(image_mask, ...)).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "vision/vision_tower.h"

namespace deltatune {

// The rows t with input_ids[t] == image_token_id, in order. Throws when their number differs from the merged
// tokens of the images (`grids` their (t, h, w)), when `pixel_values` do not fill the grids, or when the
// merger's width is not the text model's hidden size `hidden`.
std::vector<int32_t> image_token_rows(const VisionConfig& cfg, const std::vector<int32_t>& input_ids,
                                      const std::vector<float>& pixel_values,
                                      const std::vector<std::array<int64_t, 3>>& grids, int64_t hidden);

// x [T, H] (compute dtype, on `be`): rows `rows` (=) embeds [rows, H] (the tower's output, in order).
void image_embeds_insert(Backend& be, const std::vector<int32_t>& rows, const Tensor& embeds, Tensor& x);

// The loss gradient w.r.t. the inserted rows: dx[rows] as [rows, H] (dx's dtype).
Tensor image_embeds_grad(Backend& be, const std::vector<int32_t>& rows, const Tensor& dx);

}  // namespace deltatune
