// Qwen3.5's vision encoder and patch merger (transformers' Qwen3_5VisionModel), a plain fp32 CPU reference:
//   x      = patch_embed(pixel_values)                  Conv3d with stride = kernel = a linear over each row
//          + bilinear(pos_embed table side x side -> grid_h x grid_w, align_corners) per patch
//   block  x += proj(attn(LN1(x)))  with 2-D rotary (h, w) on q/k, full attention within each image frame
//          x += fc2(gelu_tanh(fc1(LN2(x))))
//   merger y  = fc2(gelu(fc1(LN(x) viewed [patches/merge², merge²·hidden])))   one row per merged token
// Rows are in the image processor's order (merge blocks together), so each run of merge² rows is one token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

class CheckpointReader;

struct VisionConfig {
  int64_t depth = 0, hidden = 0, heads = 0, intermediate = 0, in_channels = 3;
  int64_t patch_size = 16, temporal_patch_size = 2, merge_size = 2;
  int64_t num_position_embeddings = 0, out_hidden = 0;
  double rope_theta = 10000.0;
  std::string hidden_act = "gelu_pytorch_tanh";
  // The text side's special tokens (config.json top level; Qwen3_5Config's defaults when absent).
  int64_t image_token_id = 248056, vision_start_token_id = 248053, vision_end_token_id = 248054;
  int64_t head_dim() const { return hidden / heads; }
  int64_t patch_features() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
};

// config.json's vision_config. Throws naming the file and key when it is missing or malformed.
// model_dir: the checkpoint folder (its config.json is read), or a config.json file itself.
VisionConfig vision_config_read(const std::string& model_dir);

struct VisionLinear {
  std::vector<float> w;  // (out, in)
  std::vector<float> b;  // (out)
  int64_t out = 0, in = 0;
};

struct VisionLayerNorm {
  std::vector<float> w, b;
};

struct VisionBlockWeights {
  VisionLayerNorm norm1, norm2;
  VisionLinear qkv, proj, fc1, fc2;
};

struct VisionWeights {
  VisionConfig cfg;
  VisionLinear patch_embed;    // (hidden, C·T·P·P)
  std::vector<float> pos_embed;  // (num_position_embeddings, hidden)
  std::vector<VisionBlockWeights> blocks;
  VisionLayerNorm merger_norm;
  VisionLinear merger_fc1, merger_fc2;
};

// The tower's tensors from a checkpoint (`model.visual.*`, or `visual.*` as older VL checkpoints store them),
// converted to fp32. Throws naming the checkpoint folder and the missing key or the shape it expected.
VisionWeights vision_weights_load(const CheckpointReader& ckpt, const VisionConfig& cfg);

struct VisionOutput {
  std::vector<float> hidden;  // (patches, hidden): the last block's output
  std::vector<float> embeds;  // (patches / merge², out_hidden): the merger's output
};

// Patches of images with these (t, h, w) grids.
int64_t vision_patch_count(const std::vector<std::array<int64_t, 3>>& grids);
// Each patch's (row, column) in its image's patch grid, I32 [2, patches] (all rows, then all columns), in the
// image processor's order (merge blocks together): the 2-D rotary positions.
std::vector<int32_t> vision_patch_positions(const std::vector<std::array<int64_t, 3>>& grids, int64_t merge);
// The learned position table bilinearly interpolated to each patch (transformers' fast_pos_embed_interpolate),
// fp32 [patches, hidden].
std::vector<float> vision_position_embeds(const VisionWeights& w, const std::vector<std::array<int64_t, 3>>& grids);
// Patch offsets where each image frame starts, and the total at the end (attention runs within a frame).
std::vector<int32_t> vision_frame_bounds(const std::vector<std::array<int64_t, 3>>& grids);

// `pixel_values` (rows, patch_features) of several images back to back, `grids` their (t, h, w).
VisionOutput vision_forward(const VisionWeights& w, const std::vector<float>& pixel_values,
                            const std::vector<std::array<int64_t, 3>>& grids);

}  // namespace deltatune
