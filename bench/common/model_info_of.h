// The ModelInfo (deltatune/model_info.h) of in-memory weights, for the memory plan of a bench's random model:
// the shapes come from its config, the parameter counts from its tensors.
#pragma once
#include <string>

#include "deltatune/model_info.h"
#include "model/model_info_shapes.h"
#include "model/weights.h"

namespace deltatune::bench {

inline ModelInfo model_info_of(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  ModelInfo i;
  model_info_fill_shapes(c, &i);  // shapes and the LoRA groups, as for a checkpoint's config
  i.tied_embeddings = w.tied;
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
