// Early fusion of a vision-language batch: the vision tower's merged tokens replace the embedding rows of the
// batch's image tokens (transformers' Qwen3_5Model.forward: inputs_embeds.masked_scatter(image_mask, ...)).
#pragma once
#include "backend/backend.h"
#include "data/batch.h"
#include "vision/vision_tower.h"

namespace deltatune {

// x [T, H] (compute dtype, on `be`): rows t with input_ids[t] == image_token_id (=) the merged tokens of the
// batch's images, in order. The tower runs on the host in fp32 (frozen). Throws when the batch's image tokens
// and its images' merged tokens differ in number, or the merger's width is not the text model's hidden size.
void image_embeds_insert(Backend& be, const VisionWeights& vision, const Batch& batch, Tensor& x);

}  // namespace deltatune
