// Checkpoint -> ModelWeights (spec §2). Every expected text tensor must be present with its exact shape;
// anything else under the text prefix is an error, because a tensor we silently ignore is math we don't
// do. Vision and MTP tensors are counted and skipped. Tensors keep their stored dtype (mmap views); the
// model code converts.
#include "model/weights.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "quant/quantize_host.h"

namespace deltatune {

// Vision tower (`model.visual.*`, or top-level `visual.*` as older VL checkpoints store it; HF loads both)
// and the MTP head (`mtp.*`).
bool model_key_skipped(const std::string& key) {
  return key.rfind("model.visual.", 0) == 0 || key.rfind("visual.", 0) == 0 || key.rfind("mtp.", 0) == 0;
}

// The causal-LM classes' layouts, then the base models' (Qwen3_5Model: language_model.*, Qwen3_5TextModel:
// no prefix), which transformers also loads into the causal-LM classes (tied: nothing is missing).
std::string model_key_prefix(const CheckpointReader& reader) {
  for (const char* p : {"model.language_model.", "model.", "language_model.", ""})
    if (reader.has(std::string(p) + "embed_tokens.weight")) return p;
  throw Error(
      reader.dir() +
      ": no model.language_model.embed_tokens.weight or model.embed_tokens.weight (nor a base model's "
      "language_model.embed_tokens.weight / embed_tokens.weight): expected a Qwen3.5 Hugging Face "
      "checkpoint");
}

bool model_experts_per_expert(const CheckpointReader& reader, const std::string& p) {
  return !reader.has(p + "layers.0.mlp.experts.gate_up_proj") &&
         reader.has(p + "layers.0.mlp.experts.0.gate_proj.weight");
}

std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& c, const std::string& prefix,
                                                   bool per_expert_layout) {
  std::vector<ExpectedTensor> out;
  auto add = [&](const std::string& key, Shape shape, const char* group) {
    out.push_back({prefix + key, std::move(shape), group});
  };
  const int64_t H = c.hidden_size;
  add("embed_tokens.weight", {c.vocab_size, H}, "embed");
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {H}, "norm");
    add(l + "post_attention_layernorm.weight", {H}, "norm");
    if (c.layer_types.at(static_cast<size_t>(i)) == LayerKind::FullAttention) {
      const std::string a = l + "self_attn.";
      add(a + "q_proj.weight", {c.num_heads * c.head_dim * 2, H}, "attn");
      add(a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H}, "attn");
      add(a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H}, "attn");
      add(a + "o_proj.weight", {H, c.num_heads * c.head_dim}, "attn");
      add(a + "q_norm.weight", {c.head_dim}, "norm");
      add(a + "k_norm.weight", {c.head_dim}, "norm");
    } else {
      const std::string a = l + "linear_attn.";
      add(a + "in_proj_qkv.weight", {c.conv_dim(), H}, "linear_attn");
      add(a + "in_proj_z.weight", {c.value_dim(), H}, "linear_attn");
      add(a + "in_proj_b.weight", {c.lin_v_heads, H}, "linear_attn");
      add(a + "in_proj_a.weight", {c.lin_v_heads, H}, "linear_attn");
      add(a + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, "linear_attn");
      add(a + "dt_bias", {c.lin_v_heads}, "linear_attn");
      add(a + "A_log", {c.lin_v_heads}, "linear_attn");
      add(a + "norm.weight", {c.lin_v_dim}, "norm");
      add(a + "out_proj.weight", {H, c.value_dim()}, "linear_attn");
    }
    const std::string m = l + "mlp.";
    if (c.is_moe()) {
      const int64_t E = c.num_experts, Ie = c.moe_intermediate, Is = c.shared_intermediate;
      add(m + "gate.weight", {E, H}, "router");
      if (per_expert_layout) {
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = m + "experts." + std::to_string(e) + ".";
          add(x + "gate_proj.weight", {Ie, H}, "experts");
          add(x + "up_proj.weight", {Ie, H}, "experts");
          add(x + "down_proj.weight", {H, Ie}, "experts");
        }
      } else {
        add(m + "experts.gate_up_proj", {E, 2 * Ie, H}, "experts");
        add(m + "experts.down_proj", {E, H, Ie}, "experts");
      }
      add(m + "shared_expert.gate_proj.weight", {Is, H}, "shared_expert");
      add(m + "shared_expert.up_proj.weight", {Is, H}, "shared_expert");
      add(m + "shared_expert.down_proj.weight", {H, Is}, "shared_expert");
      add(m + "shared_expert_gate.weight", {1, H}, "shared_expert");
    } else {
      add(m + "gate_proj.weight", {c.intermediate_size, H}, "mlp");
      add(m + "up_proj.weight", {c.intermediate_size, H}, "mlp");
      add(m + "down_proj.weight", {H, c.intermediate_size}, "mlp");
    }
  }
  add("norm.weight", {H}, "norm");
  return out;
}

namespace {

bool is_float(DType dt) {
  return dt == DType::F32 || dt == DType::BF16 || dt == DType::F16;
}

// An FP8 checkpoint (config.json quant_method fp8) stores a matrix as F8_E4M3 (read as U8) with its 128x128
// block scales beside it under `<key>_scale_inv` (transformers' fine-grained FP8).
std::string scale_inv_key(const std::string& key) { return key + "_scale_inv"; }
bool is_fp8(const CheckpointReader& r, const std::string& key) {
  return r.entry(key).dtype == DType::U8 && r.has(scale_inv_key(key));
}

// The tensor `key` as a host tensor; an FP8 matrix dequantized to BF16 (what the model reads outside the dense
// linear layers, e.g. experts).
Tensor read_tensor(const CheckpointReader& r, const std::string& key) {
  if (!is_fp8(r, key)) return r.get(key);
  return host_convert(dequantize_host(fp8_weight_host(r.get(key), r.get(scale_inv_key(key)))), DType::BF16);
}

// Stacks per-expert 2-D weights into the fused [E, 2Ie, H] / [E, H, Ie] layout (host copies).
void stack_experts(const CheckpointReader& r, const std::string& m, const ModelConfig& c, MoeWeights* moe) {
  const int64_t E = c.num_experts, Ie = c.moe_intermediate, H = c.hidden_size;
  const DType stored = r.entry(m + "experts.0.gate_proj.weight").dtype;
  const DType dt = is_fp8(r, m + "experts.0.gate_proj.weight") ? DType::BF16 : stored;
  moe->gate_up = host_tensor({E, 2 * Ie, H}, dt);
  moe->down = host_tensor({E, H, Ie}, dt);
  const size_t half = static_cast<size_t>(Ie * H) * dtype_size(dt);
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    const Tensor gate = read_tensor(r, x + "gate_proj.weight"), up = read_tensor(r, x + "up_proj.weight"),
                 down = read_tensor(r, x + "down_proj.weight");
    for (const auto* t : {&gate, &up, &down})
      check(t->dtype == dt, r.dir() + ": expert tensors of " + m + "experts mix dtypes (" + dtype_name(dt) +
                                " and " + dtype_name(t->dtype) + "); expected one dtype to stack them");
    char* gu = static_cast<char*>(moe->gate_up.index(e).data);
    std::memcpy(gu, gate.data, half);  // rows [0, Ie) = gate, [Ie, 2Ie) = up (spec §2.5, item 4)
    std::memcpy(gu + half, up.data, half);
    std::memcpy(moe->down.index(e).data, down.data, down.nbytes());
  }
}

}  // namespace

ModelWeights model_weights_load(const std::string& dir) {
  namespace fs = std::filesystem;
  ModelWeights w;
  w.dir = dir;
  w.config = model_config_load((fs::path(dir) / "config.json").string());
  w.reader = std::make_shared<CheckpointReader>(dir);
  const CheckpointReader& r = *w.reader;
  const ModelConfig& c = w.config;
  const std::string P = model_key_prefix(r);
  w.key_prefix = P;
  w.experts_per_expert_layout = c.is_moe() && model_experts_per_expert(r, P);

  auto where = [&](const std::string& key) { return (fs::path(dir) / r.file_of(key)).string(); };
  // Expected shapes come from config.json, with Hugging Face's defaults for the size fields it left out.
  const std::string note = model_config_defaults_note(c);
  const std::string from = "from config.json" + (note.empty() ? "" : " (" + note + ")");
  std::set<std::string> used;
  for (const ExpectedTensor& e : model_expected_tensors(c, P, w.experts_per_expert_layout)) {
    check(r.has(e.key), dir + ": checkpoint has no tensor '" + e.key + "' (expected shape " +
                            shape_str(e.shape) + " " + from + ")");
    const TensorEntry& got = r.entry(e.key);
    check(got.shape == e.shape, where(e.key) + ": tensor '" + e.key + "' has shape " + shape_str(got.shape) +
                                    ", expected " + shape_str(e.shape) + " " + from);
    if (got.dtype == DType::U8 && c.quant_method == "fp8" && got.shape.size() == 2) {
      const std::string sk = scale_inv_key(e.key);
      const Shape want{(got.shape[0] + c.quant_block_rows - 1) / c.quant_block_rows,
                       (got.shape[1] + c.quant_block_cols - 1) / c.quant_block_cols};
      check(r.has(sk), where(e.key) + ": F8_E4M3 tensor '" + e.key + "' has no '" + sk +
                           "' (expected its 128x128 block scales, quantization_config quant_method fp8)");
      check(r.entry(sk).shape == want && is_float(r.entry(sk).dtype),
            where(sk) + ": tensor '" + sk + "' has shape " + shape_str(r.entry(sk).shape) + " and dtype " +
                dtype_name(r.entry(sk).dtype) + ", expected " + shape_str(want) + " of F32, BF16 or F16");
      used.insert(sk);
    } else {
      check(is_float(got.dtype), where(e.key) + ": tensor '" + e.key + "' has dtype " + dtype_name(got.dtype) +
                                     (c.quant_method == "fp8" ? " (expected F8_E4M3 with weight_scale_inv, F32, BF16 or F16)"
                                                              : " (expected F32, BF16 or F16)"));
    }
    used.insert(e.key);
  }
  w.tied = !r.has("lm_head.weight");
  if (!w.tied) {
    const TensorEntry& got = r.entry("lm_head.weight");
    const Shape want{c.vocab_size, c.hidden_size};
    check(got.shape == want, where("lm_head.weight") + ": tensor 'lm_head.weight' has shape " +
                                 shape_str(got.shape) + ", expected " + shape_str(want));
    check(is_float(got.dtype), where("lm_head.weight") + ": tensor 'lm_head.weight' has dtype " +
                                   dtype_name(got.dtype) + " (expected F32, BF16 or F16)");
    used.insert("lm_head.weight");
  }
  if (w.tied != c.tie_word_embeddings_flag)
    w.warnings.push_back(std::string("config.json says tie_word_embeddings = ") +
                         (c.tie_word_embeddings_flag ? "true" : "false") + " but the checkpoint " +
                         (w.tied ? "has no" : "has an") + " lm_head.weight; following the checkpoint (" +
                         (w.tied ? "tied" : "untied") + ")");

  std::vector<std::string> unknown;
  for (const std::string& name : r.names()) {
    if (used.count(name)) continue;
    if (model_key_skipped(name))
      ++w.skipped_tensors;
    else
      unknown.push_back(name);
  }
  if (!unknown.empty())
    throw Error(
        where(unknown[0]) + ": unexpected tensor '" + unknown[0] + "'" +
        (unknown.size() > 1 ? " (and " + std::to_string(unknown.size() - 1) + " more)" : std::string()) +
        " that a " + c.model_type + " text model with this config.json does not have");

  if (c.quant_method == "fp8") w.base_quant = QuantFormat::FP8;
  auto get = [&](const std::string& key) { return read_tensor(r, P + key); };
  // A dense linear matrix: an FP8 one stays quantized (its scales kept under its module name).
  auto get_linear = [&](const std::string& key) {
    if (!is_fp8(r, P + key)) return r.get(P + key);
    w.fp8_scale_inv[key.substr(0, key.size() - std::string(".weight").size())] = r.get(P + scale_inv_key(key));
    return r.get(P + key);
  };
  w.embed = get("embed_tokens.weight");
  w.final_norm = get("norm.weight");
  w.lm_head = w.tied ? w.embed : read_tensor(r, "lm_head.weight");
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& L = w.layers[static_cast<size_t>(i)];
    const std::string l = "layers." + std::to_string(i) + ".";
    L.kind = c.layer_types[static_cast<size_t>(i)];
    L.input_norm = get(l + "input_layernorm.weight");
    L.post_norm = get(l + "post_attention_layernorm.weight");
    if (L.kind == LayerKind::FullAttention) {
      const std::string a = l + "self_attn.";
      L.attn.q_proj = get_linear(a + "q_proj.weight");
      L.attn.k_proj = get_linear(a + "k_proj.weight");
      L.attn.v_proj = get_linear(a + "v_proj.weight");
      L.attn.o_proj = get_linear(a + "o_proj.weight");
      L.attn.q_norm = get(a + "q_norm.weight");
      L.attn.k_norm = get(a + "k_norm.weight");
    } else {
      const std::string a = l + "linear_attn.";
      L.lin.in_proj_qkv = get_linear(a + "in_proj_qkv.weight");
      L.lin.in_proj_z = get_linear(a + "in_proj_z.weight");
      L.lin.in_proj_b = get_linear(a + "in_proj_b.weight");
      L.lin.in_proj_a = get_linear(a + "in_proj_a.weight");
      L.lin.conv1d = get(a + "conv1d.weight").view({c.conv_dim(), c.conv_kernel});
      L.lin.dt_bias = get(a + "dt_bias");
      L.lin.A_log = get(a + "A_log");
      L.lin.norm = get(a + "norm.weight");
      L.lin.out_proj = get_linear(a + "out_proj.weight");
    }
    const std::string m = l + "mlp.";
    if (c.is_moe()) {
      L.moe.router = get(m + "gate.weight");
      if (w.experts_per_expert_layout) {
        stack_experts(r, P + m, c, &L.moe);
      } else {
        L.moe.gate_up = get(m + "experts.gate_up_proj");
        L.moe.down = get(m + "experts.down_proj");
      }
      L.moe.shared.gate_proj = get_linear(m + "shared_expert.gate_proj.weight");
      L.moe.shared.up_proj = get_linear(m + "shared_expert.up_proj.weight");
      L.moe.shared.down_proj = get_linear(m + "shared_expert.down_proj.weight");
      L.moe.shared_gate = get(m + "shared_expert_gate.weight");
    } else {
      L.mlp.gate_proj = get_linear(m + "gate_proj.weight");
      L.mlp.up_proj = get_linear(m + "up_proj.weight");
      L.mlp.down_proj = get_linear(m + "down_proj.weight");
    }
  }
  return w;
}

}  // namespace deltatune
