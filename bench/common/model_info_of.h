// The ModelInfo (deltatune/model_info.h) of in-memory weights, for the memory plan of a bench's random model:
// the shapes come from its config, the parameter counts from its tensors.
#pragma once
#include <string>

#include "deltatune/model_info.h"
#include "model/weights.h"

namespace deltatune::bench {

inline ModelInfo model_info_of(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  ModelInfo i;
  i.model_type = c.model_type;
  i.is_moe = c.is_moe();
  i.tied_embeddings = w.tied;
  i.vocab_size = c.vocab_size;
  i.hidden_size = c.hidden_size;
  i.num_layers = c.num_layers;
  i.intermediate_size = c.intermediate_size;
  i.num_attention_heads = c.num_heads;
  i.num_key_value_heads = c.num_kv_heads;
  i.head_dim = c.head_dim;
  i.linear_num_key_heads = c.lin_k_heads;
  i.linear_num_value_heads = c.lin_v_heads;
  i.linear_key_head_dim = c.lin_k_dim;
  i.linear_value_head_dim = c.lin_v_dim;
  i.num_experts = c.num_experts;
  i.num_experts_per_tok = c.top_k;
  i.moe_intermediate_size = c.moe_intermediate;
  i.shared_expert_intermediate_size = c.shared_intermediate;
  for (LayerKind k : c.layer_types)
    i.layer_types.push_back(k == LayerKind::FullAttention ? "full_attention" : "linear_attention");
  auto count = [&](const std::string& group, std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts)
      if (t->defined()) i.params_per_group[group] += t->numel();
  };
  count("embed", {&w.embed});
  count("norm", {&w.final_norm});
  if (!w.tied) count("lm_head", {&w.lm_head});
  for (const LayerWeights& l : w.layers) {
    count("norm", {&l.input_norm, &l.post_norm});
    if (l.kind == LayerKind::FullAttention)
      count("attn", {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj, &l.attn.q_norm, &l.attn.k_norm});
    else
      count("linear_attn", {&l.lin.in_proj_qkv, &l.lin.in_proj_z, &l.lin.in_proj_b, &l.lin.in_proj_a, &l.lin.conv1d,
                            &l.lin.dt_bias, &l.lin.A_log, &l.lin.norm, &l.lin.out_proj});
    if (c.is_moe()) {
      count("router", {&l.moe.router});
      count("experts", {&l.moe.gate_up, &l.moe.down});
      count("shared_expert", {&l.moe.shared.gate_proj, &l.moe.shared.up_proj, &l.moe.shared.down_proj,
                              &l.moe.shared_gate});
    } else {
      count("mlp", {&l.mlp.gate_proj, &l.mlp.up_proj, &l.mlp.down_proj});
    }
  }
  for (const auto& [g, n] : i.params_per_group) i.total_params += n;
  return i;
}

}  // namespace deltatune::bench
