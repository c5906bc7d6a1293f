// A random-weight Qwen3.5 model in a public shape (spec §1.3: 0.8b, 2b, 4b, 9b, 27b, 35b-a3b), built on the host
// without drawing billions of random numbers: shared by the benchmark programs (train_step, generate).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "core/error.h"
#include "model/weights.h"

namespace deltatune::bench {

inline ModelConfig shape_config(const std::string& shape, int64_t layers) {
  ModelConfig c;
  c.model_type = "qwen3_5";
  c.architecture = "Qwen3_5ForCausalLM";
  c.vocab_size = 248320;
  c.head_dim = 256;
  c.lin_k_heads = 16;
  c.lin_k_dim = c.lin_v_dim = 128;
  c.conv_kernel = 4;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  if (shape == "0.8b") {
    c.num_layers = 24, c.hidden_size = 1024, c.num_heads = 8, c.num_kv_heads = 2, c.intermediate_size = 3584;
    c.lin_v_heads = 16, c.tie_word_embeddings_flag = true;
  } else if (shape == "2b") {
    c.num_layers = 24, c.hidden_size = 2048, c.num_heads = 8, c.num_kv_heads = 2, c.intermediate_size = 6144;
    c.lin_v_heads = 16, c.tie_word_embeddings_flag = true;
  } else if (shape == "4b") {
    c.num_layers = 32, c.hidden_size = 2560, c.num_heads = 16, c.num_kv_heads = 4, c.intermediate_size = 9216;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = true;
  } else if (shape == "9b") {
    c.num_layers = 32, c.hidden_size = 4096, c.num_heads = 16, c.num_kv_heads = 4, c.intermediate_size = 12288;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = false;
  } else if (shape == "27b") {
    c.num_layers = 64, c.hidden_size = 5120, c.num_heads = 24, c.num_kv_heads = 4, c.intermediate_size = 17408;
    c.lin_v_heads = 48, c.tie_word_embeddings_flag = false;
  } else if (shape == "35b-a3b") {  // MoE: every layer sparse with a shared expert
    c.model_type = "qwen3_5_moe";
    c.architecture = "Qwen3_5MoeForCausalLM";
    c.num_layers = 40, c.hidden_size = 2048, c.num_heads = 16, c.num_kv_heads = 2, c.intermediate_size = 0;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = false;
    c.num_experts = 256, c.top_k = 8, c.moe_intermediate = 512, c.shared_intermediate = 512;
  } else if (shape == "122b-a10b") {  // MoE as 35b-a3b (tests/fixtures/published_configs/qwen3_5_122b_a10b.json)
    c.model_type = "qwen3_5_moe";
    c.architecture = "Qwen3_5MoeForCausalLM";
    c.num_layers = 48, c.hidden_size = 3072, c.num_heads = 32, c.num_kv_heads = 2, c.intermediate_size = 0;
    c.lin_v_heads = 64, c.tie_word_embeddings_flag = false;
    c.num_experts = 256, c.top_k = 8, c.moe_intermediate = 1024, c.shared_intermediate = 1024;
  } else {
    throw Error("--shape must be 0.8b, 2b, 4b, 9b, 27b, 35b-a3b or 122b-a10b, got '" + shape + "'");
  }
  if (layers > 0) c.num_layers = layers;
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  return c;
}

// Random bf16 matrices without 9B host random draws: one bank of uniform values (std 0.02, HF's
// initializer_range) as large as the largest matrix plus a margin; each matrix views it at its own offset.
struct Bank {
  Tensor t;
  int64_t n = 0, margin = 1 << 20;
  uint64_t next = 1;
  explicit Bank(int64_t largest) {
    n = largest + margin;
    t = host_tensor({n}, DType::BF16);
    uint16_t* p = t.ptr<uint16_t>();
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const float a = 0.02f * std::sqrt(3.f);
    for (int64_t i = 0; i < n; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      const float u = (static_cast<float>(s >> 40) * (1.f / 16777216.f)) * 2.f * a - a;
      uint32_t bits;
      std::memcpy(&bits, &u, 4);
      p[i] = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    }
  }
  Tensor mat(Shape s) {
    next = next * 6364136223846793005ull + 1442695040888963407ull;
    Tensor v = t;
    v.shape = std::move(s);
    v.data = static_cast<char*>(t.data) + 2 * static_cast<int64_t>((next >> 33) % static_cast<uint64_t>(margin));
    return v;
  }
};

inline Tensor vec(int64_t n, float lo, float hi, std::mt19937& rng) {
  Tensor t = host_tensor({n}, DType::F32);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

inline ModelWeights random_weights(const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  const int64_t largest = std::max({c.vocab_size * H, c.intermediate_size * H, c.conv_dim() * H,
                                    2 * c.num_heads * c.head_dim * H, c.num_experts * 2 * c.moe_intermediate * H});
  auto bank = std::make_shared<Bank>(largest);  // the views share its storage, which outlives the bank
  std::mt19937 rng(5);
  ModelWeights w;
  w.config = c;
  w.key_prefix = "model.";
  w.tied = c.tie_word_embeddings_flag;
  w.embed = bank->mat({c.vocab_size, H});
  w.lm_head = w.tied ? w.embed : bank->mat({c.vocab_size, H});
  w.final_norm = vec(H, -0.05f, 0.05f, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.kind = c.layer_types[static_cast<size_t>(i)];
    l.input_norm = vec(H, -0.05f, 0.05f, rng);
    l.post_norm = vec(H, -0.05f, 0.05f, rng);
    if (l.kind == LayerKind::FullAttention) {
      l.attn.q_proj = bank->mat({c.num_heads * c.head_dim * 2, H});
      l.attn.k_proj = bank->mat({c.num_kv_heads * c.head_dim, H});
      l.attn.v_proj = bank->mat({c.num_kv_heads * c.head_dim, H});
      l.attn.o_proj = bank->mat({H, c.num_heads * c.head_dim});
      l.attn.q_norm = vec(c.head_dim, -0.05f, 0.05f, rng);
      l.attn.k_norm = vec(c.head_dim, -0.05f, 0.05f, rng);
    } else {
      l.lin.in_proj_qkv = bank->mat({c.conv_dim(), H});
      l.lin.in_proj_z = bank->mat({c.value_dim(), H});
      l.lin.in_proj_b = bank->mat({c.lin_v_heads, H});
      l.lin.in_proj_a = bank->mat({c.lin_v_heads, H});
      l.lin.conv1d = vec(c.conv_dim() * c.conv_kernel, -0.5f, 0.5f, rng).view({c.conv_dim(), c.conv_kernel});
      l.lin.dt_bias = vec(c.lin_v_heads, 0.9f, 1.1f, rng);
      Tensor a = vec(c.lin_v_heads, 1.f, 16.f, rng);
      for (int64_t j = 0; j < c.lin_v_heads; ++j) a.ptr<float>()[j] = std::log(a.ptr<float>()[j]);
      l.lin.A_log = a;
      l.lin.norm = vec(c.lin_v_dim, 0.95f, 1.05f, rng);
      l.lin.out_proj = bank->mat({H, c.value_dim()});
    }
    if (c.is_moe()) {
      l.moe.router = bank->mat({c.num_experts, H});
      l.moe.gate_up = bank->mat({c.num_experts, 2 * c.moe_intermediate, H});
      l.moe.down = bank->mat({c.num_experts, H, c.moe_intermediate});
      l.moe.shared.gate_proj = bank->mat({c.shared_intermediate, H});
      l.moe.shared.up_proj = bank->mat({c.shared_intermediate, H});
      l.moe.shared.down_proj = bank->mat({H, c.shared_intermediate});
      l.moe.shared_gate = bank->mat({1, H});
    } else {
      l.mlp.gate_proj = bank->mat({c.intermediate_size, H});
      l.mlp.up_proj = bank->mat({c.intermediate_size, H});
      l.mlp.down_proj = bank->mat({H, c.intermediate_size});
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace deltatune::bench
