// Tiny Qwen3.5 configurations for unit tests: 2 attention heads (1 kv head) of dim 8, GDN 1 key head and 2 value
// heads (key dim 8, value dim 4); the layer kinds, widths and experts are the caller's.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "io/model_config.h"

namespace deltatune::testing_tiny {

inline ModelConfig dense(int64_t hidden, int64_t intermediate, std::vector<LayerKind> layers) {
  ModelConfig c;
  c.model_type = "qwen3_5";
  c.hidden_size = hidden;
  c.num_layers = static_cast<int64_t>(layers.size());
  c.intermediate_size = intermediate;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.lin_k_heads = 1;
  c.lin_v_heads = 2;
  c.lin_k_dim = 8;
  c.lin_v_dim = 4;
  c.layer_types = std::move(layers);
  return c;
}

inline ModelConfig moe(int64_t hidden, int64_t experts, int64_t moe_intermediate, int64_t shared_intermediate,
                       std::vector<LayerKind> layers) {
  ModelConfig c = dense(hidden, 0, std::move(layers));
  c.model_type = "qwen3_5_moe";
  c.num_experts = experts;
  c.moe_intermediate = moe_intermediate;
  c.shared_intermediate = shared_intermediate;
  return c;
}

}  // namespace deltatune::testing_tiny
