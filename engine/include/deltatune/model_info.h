// What the studio and `deltatune info` show about a checkpoint folder, without loading weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deltatune {

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
  // Target groups this model has (attn, linear_attn, mlp | shared_expert, experts).
  std::vector<std::string> lora_groups;
};

// Reads config.json, the safetensors headers and tokenizer files of `dir`. Throws deltatune::Error.
ModelInfo model_info_load(const std::string& dir);
// The same from a config.json alone (no weights, no tokenizer): parameter counts from the tensor shapes the
// config implies, embeddings tied as config.json says. For planning models not downloaded yet.
ModelInfo model_info_from_config(const std::string& config_json_path);

// LoRA trainable parameter count per target group for rank r.
std::map<std::string, int64_t> lora_params_per_group(const ModelInfo& info, int r);

// Rough peak-VRAM estimate (bytes) for a run on a GPU backend.
// Formula: see estimate_vram in engine/src/model/model_info.cpp. LoRA counts the default target groups
// (every group but experts).
struct VramEstimate {
  int64_t weights = 0, lora_and_optimizer = 0, activations = 0, logits = 0, total = 0;
  int64_t overhead = 0;  // CUDA context, workspaces, allocator slack (included in total)
};
// checkpoint_layers: with gradient_checkpointing, how many decoder layers (from the first) are checkpointed;
// -1 = all (see RunConfig::gradient_checkpointing_layers).
// base_quantization (RunConfig's): "fp8" holds the linear matrices (attn, linear_attn, mlp, shared_expert, experts)
// in 1 byte a value + a 4-byte scale per 128x128 block, "nf4" in 4 bits + 1 byte per 64 values (+ 4 bytes per
// 256 blocks), plus one bf16 copy of the largest such matrix (one layer's stacked experts in an MoE) dequantized
// before its GEMM; an untied embedding table is then held on the host (not counted). loss_chunk_rows: with
// fused_loss, the rows of fp32 logits computed at a time.
VramEstimate estimate_vram(const ModelInfo& info, int lora_r, int64_t tokens_per_step, bool fused_loss,
                           bool gradient_checkpointing, int64_t checkpoint_layers = -1,
                           const std::string& base_quantization = "none", int64_t loss_chunk_rows = 1024);

}  // namespace deltatune
