// Multimodal rotary positions of a token sequence with images (transformers' Qwen3_5Model.get_rope_index):
// three rows (temporal, height, width). Text tokens advance all three together; the run of image tokens of
// an image with merged grid (t, h', w') = (t, h / merge, w / merge) starts at the current position p and
// gives token (ti, hi, wi) (row-major) the positions (p + ti, p + hi, p + wi); the position after the image
// is p + max(h', w'). Text-only sequences get three equal rows 0, 1, 2, ...
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

// `grids`: the (t, h, w) patch grids of the sequence's images in order. Throws naming `source` when the
// image-token runs do not match the grids (count of runs, or tokens in a run vs t·h·w / merge²).
std::array<std::vector<int32_t>, 3> mrope_positions(const std::vector<int32_t>& ids, int32_t image_token_id,
                                                    const std::vector<std::array<int64_t, 3>>& grids,
                                                    int64_t merge_size, const std::string& source);

// The text model's rotary tables for those positions (transformers' Qwen3_5TextRotaryEmbedding):
// inv_freq[i] = 1 / theta^(2i / rot_dim) for i < rot_dim / 2; with the interleaved layout frequency slot i
// takes its position from H when i % 3 == 1 and i < 3·section[1], from W when i % 3 == 2 and i < 3·section[2],
// else from T. cos/sin: (T, rot_dim) = cat(f, f) per token, computed in fp32 as HF does.
void mrope_cos_sin(const std::array<std::vector<int32_t>, 3>& positions, int64_t rot_dim, double theta,
                   const std::array<int64_t, 3>& section, std::vector<float>& cos, std::vector<float>& sin);

}  // namespace deltatune
