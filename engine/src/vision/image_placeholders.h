// The processor's expansion of image placeholders in a rendered chat (transformers' Qwen3VLProcessor, which
// Qwen3.5 uses): the i-th `<|image_pad|>` of the text becomes grid_t·grid_h·grid_w / merge² copies of
// itself, one per merged token of image i, before tokenization.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

// Throws naming `source` when the text has a different number of placeholders than `tokens_per_image`.
std::string image_placeholders_expand(const std::string& text, const std::string& image_token,
                                      const std::vector<int64_t>& tokens_per_image, const std::string& source);

}  // namespace deltatune
