// Qwen3.5 text configuration (spec §1), read from a checkpoint's config.json (flat or nested text_config).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

enum class LayerKind { LinearAttention, FullAttention };

struct ModelConfig {
  std::string model_type;     // "qwen3_5" | "qwen3_5_moe" (text_config's *_text normalised away)
  std::string architecture;   // architectures[0] ("" if absent)
  bool nested_text_config = false;  // config.json had text_config (ForConditionalGeneration layout)
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, intermediate_size = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 4;
  int64_t num_experts = 0, top_k = 0, moe_intermediate = 0, shared_intermediate = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000000.0;
  double partial_rotary_factor = 0.25;
  // Multimodal RoPE (rope_parameters.mrope_section, HF's default [11, 11, 10]): frequency slots taking their
  // position from the temporal, height and width rows, interleaved (Qwen3_5TextRotaryEmbedding).
  std::array<int64_t, 3> mrope_section{11, 11, 10};
  std::vector<LayerKind> layer_types;
  bool tie_word_embeddings_flag = false;  // what config.json says (the checkpoint decides, see weights)
  int64_t eos_token_id = -1, pad_token_id = -1;
  // Size fields config.json left out, as "field = value": they take Hugging Face's class defaults
  // (Qwen3_5TextConfig / Qwen3_5MoeTextConfig), as transformers does; weight shape errors name them.
  std::vector<std::string> defaulted;
  // config.json quantization_config: "" (bf16 checkpoint) or "fp8" (transformers' fine-grained FP8: e4m3
  // weights with one weight_scale_inv per weight_block_size block). Other methods are refused at parse.
  std::string quant_method;
  int64_t quant_block_rows = 0, quant_block_cols = 0;  // weight_block_size of fp8
  // The vision tower's linear sizes from config.json's vision_config (0 when there is none): the `vision` LoRA
  // group's modules (blocks.N.attn.qkv / attn.proj / mlp.linear_fc1 / mlp.linear_fc2).
  int64_t vision_depth = 0, vision_hidden = 0, vision_intermediate = 0;

  bool is_moe() const { return model_type == "qwen3_5_moe"; }
  bool has_vision() const { return vision_depth > 0 && vision_hidden > 0 && vision_intermediate > 0; }
  // MoE with shared_expert_intermediate_size > 0 (0: HF's zero-width shared expert adds nothing).
  bool has_shared_expert() const { return is_moe() && shared_intermediate > 0; }
  int64_t key_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int rotary_dim() const { return static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor); }
};

// Parses `path` (a config.json). Throws deltatune::Error naming the file and the missing/bad field.
ModelConfig model_config_load(const std::string& path);
ModelConfig model_config_parse_string(const std::string& json_text, const std::string& source_name);
// "config.json leaves out a, b; Hugging Face's defaults were used: a = 1, b = 2" ("" when nothing was left out).
std::string model_config_defaults_note(const ModelConfig& c);

}  // namespace deltatune
