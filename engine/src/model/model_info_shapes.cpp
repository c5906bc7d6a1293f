#include "model/model_info_shapes.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "lora/lora.h"
#include "model/model_info_vision.h"
#include "model/weights.h"

namespace deltatune {

void model_info_fill_shapes(const ModelConfig& c, ModelInfo* info) {
  info->model_type = c.model_type;
  info->architecture = c.architecture;
  info->is_moe = c.is_moe();
  info->vocab_size = c.vocab_size;
  info->hidden_size = c.hidden_size;
  info->num_layers = c.num_layers;
  info->intermediate_size = c.intermediate_size;
  info->num_attention_heads = c.num_heads;
  info->num_key_value_heads = c.num_kv_heads;
  info->head_dim = c.head_dim;
  info->linear_num_key_heads = c.lin_k_heads;
  info->linear_num_value_heads = c.lin_v_heads;
  info->linear_key_head_dim = c.lin_k_dim;
  info->linear_value_head_dim = c.lin_v_dim;
  info->num_experts = c.num_experts;
  info->num_experts_per_tok = c.top_k;
  info->moe_intermediate_size = c.moe_intermediate;
  info->shared_expert_intermediate_size = c.shared_intermediate;
  info->layer_types.clear();
  for (LayerKind k : c.layer_types)
    info->layer_types.push_back(k == LayerKind::FullAttention ? "full_attention" : "linear_attention");

  info->lora_groups = lora_groups_of(c);
}

ModelInfo model_info_from_config(const std::string& config_json_path) {
  const ModelConfig c = model_config_load(config_json_path);
  ModelInfo info;
  info.dir = config_json_path;
  model_info_fill_shapes(c, &info);
  info.tied_embeddings = c.tie_word_embeddings_flag;
  // The tensors a checkpoint of this config holds, counted from their shapes (fused 3-D experts: the same count).
  for (const ExpectedTensor& e : model_expected_tensors(c, "model.", false)) {
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    info.params_per_group[e.group] += n;
    info.total_params += n;
    ++info.dtype_counts["BF16"];
  }
  if (!info.tied_embeddings) {
    info.params_per_group["lm_head"] += c.vocab_size * c.hidden_size;
    info.total_params += c.vocab_size * c.hidden_size;
    ++info.dtype_counts["BF16"];
  }
  model_info_fill_vision(std::filesystem::path(config_json_path).parent_path().string(), nullptr, &info, config_json_path);
  if (!c.defaulted.empty()) info.warnings.push_back(model_config_defaults_note(c));
  info.warnings.push_back("shapes from " + config_json_path + " only: no weights were read");
  return info;
}

}  // namespace deltatune
