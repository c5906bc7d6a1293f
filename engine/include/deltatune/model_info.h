// What the studio and `deltatune info` show about a checkpoint folder, without loading weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "deltatune/loss_logits.h"

namespace deltatune {

// The vision tower of a vision-language checkpoint (config.json vision_config, preprocessor_config.json).
struct VisionTowerInfo {
  bool present = false;  // config.json has a vision_config
  int64_t depth = 0, hidden = 0, heads = 0, intermediate = 0, out_hidden = 0;
  int64_t patch_size = 0, temporal_patch_size = 0, merge_size = 0, num_position_embeddings = 0;
  int64_t params = 0;             // the checkpoint's visual.* tensors (from config.json alone: what it implies)
  int64_t params_from_config = 0; // patch embed, position table, blocks and merger as vision_config sizes them
  int64_t min_pixels = 0, max_pixels = 0;  // preprocessor_config.json (HF's defaults when it is absent)
  std::string unusable;           // why image rows cannot be trained with this checkpoint ("" when they can)
  // The tower is frozen unless the run's LoRA targets include the `vision` group.
  int64_t patches_per_token() const { return merge_size * merge_size; }
};

struct ModelInfo {
  std::string dir;
  std::string model_type;        // qwen3_5 | qwen3_5_moe
  std::string architecture;      // e.g. Qwen3_5ForConditionalGeneration
  bool is_moe = false;
  bool tied_embeddings = false;
  bool vision_language_layout = false;  // keys under model.language_model. (or a base model's language_model.)
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, intermediate_size = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0, linear_key_head_dim = 0,
          linear_value_head_dim = 0;
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0,
          shared_expert_intermediate_size = 0;
  std::vector<std::string> layer_types;             // "linear_attention" | "full_attention"
  // embed, attn, linear_attn, mlp, router, experts, shared_expert, norm, lm_head (+ "other" for unknown
  // tensors, which also get a warning). Vision/MTP tensors are not counted.
  std::map<std::string, int64_t> params_per_group;
  int64_t total_params = 0;
  std::map<std::string, int64_t> dtype_counts;      // "BF16" -> number of tensors
  int64_t skipped_tensors = 0;                      // vision / mtp
  bool has_tokenizer = false, has_chat_template = false;
  std::vector<std::string> warnings;
  // Target groups this model has (attn, linear_attn, mlp | shared_expert, experts; vision with a vision tower).
  std::vector<std::string> lora_groups;
  VisionTowerInfo vision;
};

// Merged image tokens of one image of at most `pixels` pixels (after resizing to the patch grid):
// floor(pixels / (patch·merge)²). `pixels` <= 0 takes the preprocessor's max_pixels. 0 without a vision tower.
int64_t image_tokens_for_pixels(const ModelInfo& info, int64_t pixels = 0);

// Reads config.json, the safetensors headers and tokenizer files of `dir`. Throws deltatune::Error.
ModelInfo model_info_load(const std::string& dir);
// The same from a config.json alone (no weights, no tokenizer): parameter counts from the tensor shapes the
// config implies, embeddings tied as config.json says. For planning models not downloaded yet.
ModelInfo model_info_from_config(const std::string& config_json_path);

// LoRA trainable parameter count per target group for rank r (one entry per group in info.lora_groups).
std::map<std::string, int64_t> lora_params_per_group(const ModelInfo& info, int r);

// The groups a run trains when lora_target_groups is empty: every group of the model but `experts` (most of an
// MoE's parameters) and `vision` (the tower stays frozen unless asked for). The one rule behind the estimate,
// the shard plan and the trainer's defaults.
bool lora_group_is_default(const std::string& group);
std::vector<std::string> lora_default_groups(const ModelInfo& info);

// Rough peak-VRAM estimate (bytes) for a run on a GPU backend.
// Formula: see estimate_vram in engine/src/model/model_info.cpp. LoRA counts lora_groups (the run's
// lora_target_groups); empty: lora_default_groups(info).
struct VramEstimate {
  int64_t weights = 0, lora_and_optimizer = 0, activations = 0, logits = 0, total = 0;
  int64_t overhead = 0;  // what the backend's allocator does not see: CUDA context, kernel images (in total)
  int64_t backend_buffers = 0;  // the backend's own buffers the allocator holds: cuBLAS workspace, step buffers (in total)
  // Image rows only (0 otherwise; both included in total): the vision tower's bf16 weights, and its activations
  // for the micro-batch's image patches (the `vision` group's LoRA and optimizer state is in lora_and_optimizer).
  int64_t vision_weights = 0, vision_activations = 0;
  // The mixer inputs' bf16 base matrices padded for the K-concatenated LoRA products (CUDA; in total): member i of
  // the attention q/k/v and GDN in_proj qkv/z/b/a groups gets (i + 1)·r columns once LoRA trains them.
  int64_t lora_kcat_pad = 0;
};
// checkpoint_layers: with gradient_checkpointing, how many decoder layers (from the first) are checkpointed;
// -1 = all (see RunConfig::gradient_checkpointing_layers).
// base_quantization (RunConfig's): "fp8" holds the linear matrices (attn, linear_attn, mlp, shared_expert, experts)
// in 1 byte a value + a 4-byte scale per 128x128 block, "nf4" in 4 bits + 1 byte per 64 values (+ 4 bytes per
// 256 blocks), plus one bf16 copy of the largest such matrix (one layer's stacked experts in an MoE) dequantized
// before its GEMM, or with "fp8" the FP8 GEMMs' scratch where that is larger (transposed FP8 weights and
// quantized activations of the largest group of modules sharing an input, and a bf16 output scratch the first
// step times algorithms on). An untied embedding table is held on the host (not counted). loss_chunk_rows: with
// fused_loss, the rows of logits computed at a time (asked for: the backend caps them); loss_logits (the run
// config's): their precision, fp32 (logits and their bf16 gradient, 6 bytes a value) or bf16 (2 bytes a value, the
// gradient written over them; up to 3 times the fp32 form's rows in the same bytes).
// Image rows (a vision-language checkpoint): image_tokens_per_step merged image tokens in one micro-batch (they are
// part of tokens_per_step). The tower is trained when lora_groups holds `vision` (then its activations are kept
// for the backward, else one block's at a time). inputs_on_host (RecomputeKeep::inputs_on_host): the checkpointed
// layers' inputs but the last layer's wait in host memory; the device holds at most two of them (a layer's own
// and the one below coming back during its backward).
struct ImageLoad {
  int64_t image_tokens_per_step = 0;
};
VramEstimate estimate_vram(const ModelInfo& info, int lora_r, int64_t tokens_per_step, bool fused_loss,
                           bool gradient_checkpointing, int64_t checkpoint_layers = -1,
                           const std::string& base_quantization = "none", int64_t loss_chunk_rows = 1024,
                           const ImageLoad& images = {}, const std::vector<std::string>& lora_groups = {},
                           bool inputs_on_host = false, LossLogits loss_logits = LossLogits::F32);

}  // namespace deltatune
