// config.json -> ModelConfig. Follows what transformers' Qwen3_5(Moe)TextConfig does with the same file, so
// the engine and HF agree on every hyper-parameter (spec §1): text settings come from `text_config` when
// present (ForConditionalGeneration layout), else from the top level (ForCausalLM layout).
#include "io/model_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"

namespace deltatune {

namespace {

using nlohmann::json;

// Reads fields of one JSON object and names `source` and the dotted field path in every error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  const json& at(const std::string& key) const { return obj_[key]; }
  std::string where(const std::string& key) const { return source_ + ": field " + prefix_ + key; }

  int64_t int_or(const std::string& key, int64_t fallback) const { return has(key) ? as_int(key) : fallback; }
  double double_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    check(obj_[key].is_number(), where(key) + " is " + obj_[key].dump() + " (expected a number)");
    return obj_[key].get<double>();
  }
  bool bool_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    check(obj_[key].is_boolean(), where(key) + " is " + obj_[key].dump() + " (expected true or false)");
    return obj_[key].get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    check(obj_[key].is_string(), where(key) + " is " + obj_[key].dump() + " (expected a string)");
    return obj_[key].get<std::string>();
  }
  // Token ids may be one integer or a list (HF allows eos_token_id: [a, b]); the first one is used.
  int64_t token_id_or(const std::string& key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
    check(v.is_number_integer(), where(key) + " is " + v.dump() + " (expected an integer or a list of them)");
    return v.get<int64_t>();
  }

 private:
  int64_t as_int(const std::string& key) const {
    const json& v = obj_[key];
    check(v.is_number_integer(), where(key) + " is " + v.dump() + " (expected an integer)");
    return v.get<int64_t>();
  }

  const json& obj_;
  std::string source_, prefix_;
};

std::string normalise_model_type(const std::string& t) {
  if (t == "qwen3_5_text") return "qwen3_5";
  if (t == "qwen3_5_moe_text") return "qwen3_5_moe";
  return t;
}

// quantization_config (top level, or text_config's for a nested layout): only transformers' fine-grained FP8
// with 128x128 blocks is read; every other method is refused by name.
void parse_quantization_config(const FieldReader& top, ModelConfig& c) {
  if (!top.has("quantization_config")) return;
  const json& q = top.at("quantization_config");
  check(q.is_object(), top.where("quantization_config") + " is " + q.dump() + " (expected an object)");
  const FieldReader qr(q, "", "");
  const std::string where = top.where("quantization_config.");
  check(q.contains("quant_method") && q["quant_method"].is_string(),
        where + "quant_method is missing (expected \"fp8\")");
  const std::string method = q["quant_method"].get<std::string>();
  check(method == "fp8", where + "quant_method is \"" + method +
                             "\": checkpoints quantized with " + method +
                             " are not supported (expected \"fp8\" with weight_block_size [128, 128], or a bf16 "
                             "checkpoint with base_quantization: fp8 or nf4 in the run)");
  if (q.contains("fmt") && q["fmt"].is_string())
    check(q["fmt"].get<std::string>() == "e4m3", where + "fmt is \"" + q["fmt"].get<std::string>() +
                                                     "\" (expected \"e4m3\")");
  if (q.contains("activation_scheme") && q["activation_scheme"].is_string())
    check(q["activation_scheme"].get<std::string>() == "dynamic",
          where + "activation_scheme is \"" + q["activation_scheme"].get<std::string>() +
              "\" (expected \"dynamic\": static activation scales are not supported)");
  const json bs = q.contains("weight_block_size") ? q["weight_block_size"] : json();
  const bool ok = bs.is_array() && bs.size() == 2 && bs[0].is_number_integer() && bs[1].is_number_integer() &&
                  bs[0].get<int64_t>() == 128 && bs[1].get<int64_t>() == 128;
  check(ok, where + "weight_block_size is " + (bs.is_null() ? std::string("missing") : bs.dump()) +
                " (expected [128, 128]: per-tensor FP8 scales are not supported)");
  c.quant_method = method;
  c.quant_block_rows = 128;
  c.quant_block_cols = 128;
}

}  // namespace

static ModelConfig model_config_parse_impl(const std::string& json_text, const std::string& source_name) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source_name + ": not valid JSON (" + e.what() + ")");
  }
  check(root.is_object(), source_name + ": expected a JSON object");

  ModelConfig c;
  const FieldReader top(root, source_name, "");
  c.nested_text_config = top.has("text_config");
  if (c.nested_text_config)
    check(root["text_config"].is_object(), top.where("text_config") + " is not an object");
  const json& text = c.nested_text_config ? root["text_config"] : root;
  const FieldReader tc(text, source_name, c.nested_text_config ? "text_config." : "");

  // model_type: the top level decides; a nested text_config may repeat it as *_text and must agree.
  std::string type = normalise_model_type(top.string_or("model_type", ""));
  const std::string text_type =
      c.nested_text_config ? normalise_model_type(tc.string_or("model_type", "")) : "";
  if (type.empty()) type = text_type;
  check(!type.empty(), top.where("model_type") + " is missing (expected \"qwen3_5\" or \"qwen3_5_moe\")");
  check(type == "qwen3_5" || type == "qwen3_5_moe",
        source_name + ": unsupported model_type \"" + type + "\" (expected \"qwen3_5\" or \"qwen3_5_moe\")");
  check(text_type.empty() || text_type == type, tc.where("model_type") + " is \"" +
                                                    tc.string_or("model_type", "") +
                                                    "\", which does not match model_type \"" + type + "\"");
  c.model_type = type;
  if (top.has("architectures")) {
    const json& a = root["architectures"];
    check(a.is_array(), top.where("architectures") + " is not a list");
    if (!a.empty()) {
      check(a[0].is_string(), top.where("architectures") + "[0] is not a string");
      c.architecture = a[0].get<std::string>();
    }
  }

  // A missing size field takes the class default of transformers' Qwen3_5TextConfig / Qwen3_5MoeTextConfig,
  // as from_pretrained does; the weights' shapes then decide (model_weights names the defaulted fields).
  const bool moe = c.is_moe();
  auto size_or_default = [&](const char* key, int64_t hf_default) {
    if (!tc.has(key)) {
      std::string d = c.nested_text_config ? "text_config." : "";
      d.append(key).append(" = ").append(std::to_string(hf_default));
      c.defaulted.push_back(std::move(d));
    }
    return tc.int_or(key, hf_default);
  };
  c.vocab_size = size_or_default("vocab_size", 248320);
  c.hidden_size = size_or_default("hidden_size", moe ? 2048 : 4096);
  c.num_layers = size_or_default("num_hidden_layers", moe ? 40 : 32);
  c.num_heads = size_or_default("num_attention_heads", 16);
  c.num_kv_heads = size_or_default("num_key_value_heads", moe ? 2 : 4);
  c.head_dim = size_or_default("head_dim", 256);
  c.lin_k_heads = size_or_default("linear_num_key_heads", 16);
  c.lin_v_heads = size_or_default("linear_num_value_heads", 32);
  c.lin_k_dim = size_or_default("linear_key_head_dim", 128);
  c.lin_v_dim = size_or_default("linear_value_head_dim", 128);
  c.conv_kernel = size_or_default("linear_conv_kernel_dim", 4);
  if (moe) {
    c.num_experts = size_or_default("num_experts", 256);
    c.top_k = size_or_default("num_experts_per_tok", 8);
    c.moe_intermediate = size_or_default("moe_intermediate_size", 512);
    c.shared_intermediate = size_or_default("shared_expert_intermediate_size", 512);
  } else {
    c.intermediate_size = size_or_default("intermediate_size", 12288);
  }
  c.rms_eps = tc.double_or("rms_norm_eps", 1e-6);

  // Fields HF's Qwen3.5 classes accept but whose other values change the math we implement: refuse them
  // rather than compute something else. hidden_act drives the MLP and the GDN conv (HF's ACT2FN; "swish" is
  // SiLU there too); attention_bias adds q/k/v/o biases.
  const std::string act = tc.string_or("hidden_act", "silu");
  check(act == "silu" || act == "swish",
        tc.where("hidden_act") + " is \"" + act +
            "\" (only \"silu\" is supported: the Qwen3.5 MLP and Gated DeltaNet conv use SiLU)");
  check(!tc.bool_or("attention_bias", false),
        tc.where("attention_bias") +
            " is true (only false is supported: Qwen3.5 attention projections have no biases)");

  // RoPE, in HF's priority: rope_parameters (or legacy rope_scaling) dict, then the legacy keys at the
  // text-config level, then HF's defaults (theta 10000 = RotaryEmbeddingConfigMixin.default_theta;
  // partial_rotary_factor 0.25 forced by Qwen3_5TextConfig).
  c.rope_theta = tc.double_or("rope_theta", 10000.0);
  c.partial_rotary_factor = tc.double_or("partial_rotary_factor", 0.25);
  // HF (convert_rope_params_to_dict): a non-empty legacy `rope_scaling` dict replaces `rope_parameters`.
  const bool scaling =
      tc.has("rope_scaling") && !(tc.at("rope_scaling").is_object() && tc.at("rope_scaling").empty());
  const char* rope_key = scaling ? "rope_scaling" : tc.has("rope_parameters") ? "rope_parameters" : nullptr;
  if (rope_key) {
    const json& rp = tc.at(rope_key);
    check(rp.is_object(), tc.where(rope_key) + " is not an object");
    const FieldReader rr(rp, source_name,
                         (c.nested_text_config ? "text_config." : "") + std::string(rope_key) + ".");
    c.rope_theta = rr.double_or("rope_theta", c.rope_theta);
    c.partial_rotary_factor = rr.double_or("partial_rotary_factor", c.partial_rotary_factor);
    if (rr.has("mrope_section")) {
      const json& ms = rp.at("mrope_section");
      check(ms.is_array() && ms.size() == 3, rr.where("mrope_section") + " is not a list of 3 integers");
      for (size_t i = 0; i < 3; ++i) {
        check(ms[i].is_number_integer() && ms[i].get<int64_t>() >= 0,
              rr.where("mrope_section") + " is not a list of 3 non-negative integers");
        c.mrope_section[i] = ms[i].get<int64_t>();
      }
    }
    const std::string rope_type = rr.string_or("rope_type", rr.string_or("type", "default"));
    check(rope_type == "default", rr.where("rope_type") + " is \"" + rope_type +
                                      "\" (only \"default\" RoPE is supported, as in Qwen3.5 checkpoints)");
  }

  // Layer pattern: explicit list, else every full_attention_interval-th layer is full attention.
  if (tc.has("layer_types")) {
    const json& lt = tc.at("layer_types");
    check(lt.is_array(), tc.where("layer_types") + " is not a list");
    for (size_t i = 0; i < lt.size(); ++i) {
      const std::string v = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
      // "mamba"/"attention" are legacy spellings HF remaps (remap_legacy_layer_types).
      if (v == "linear_attention" || v == "mamba")
        c.layer_types.push_back(LayerKind::LinearAttention);
      else if (v == "full_attention" || v == "attention")
        c.layer_types.push_back(LayerKind::FullAttention);
      else
        throw Error(tc.where("layer_types") + "[" + std::to_string(i) + "] is \"" + v +
                    "\" (expected \"linear_attention\" or \"full_attention\")");
    }
    check(static_cast<int64_t>(c.layer_types.size()) == c.num_layers,
          tc.where("layer_types") + " has " + std::to_string(c.layer_types.size()) +
              " entries, expected num_hidden_layers = " + std::to_string(c.num_layers));
  } else {
    const int64_t interval = tc.int_or("full_attention_interval", 4);
    check(interval >= 1, tc.where("full_attention_interval") + " must be >= 1");
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::FullAttention
                                                      : LayerKind::LinearAttention);
  }

  // The class that reads the file decides: the nested (VL) class reads the top-level flag, the flat class
  // its own. The checkpoint (absence of lm_head.weight) is the ground truth anyway, see weights.
  c.tie_word_embeddings_flag =
      c.nested_text_config && top.has("tie_word_embeddings")
          ? top.bool_or("tie_word_embeddings", false)
          : tc.bool_or("tie_word_embeddings", top.bool_or("tie_word_embeddings", false));
  c.eos_token_id = tc.token_id_or("eos_token_id", top.token_id_or("eos_token_id", -1));
  c.pad_token_id = tc.token_id_or("pad_token_id", top.token_id_or("pad_token_id", -1));

  parse_quantization_config(top, c);
  // vision_config: only the sizes the vision LoRA group needs (vision/vision_tower.h reads and checks the rest
  // when images are used); a malformed one leaves the model without that group.
  if (root.contains("vision_config") && root["vision_config"].is_object()) {
    const json& v = root["vision_config"];
    auto size = [&](const char* key) {
      return v.contains(key) && v[key].is_number_integer() ? v[key].get<int64_t>() : int64_t(0);
    };
    c.vision_depth = size("depth");
    c.vision_hidden = size("hidden_size");
    c.vision_intermediate = size("intermediate_size");
  }

  // Consistency: everything the model code will rely on.
  auto positive = [&](int64_t v, const char* key) {
    check(v > 0, tc.where(key) + " is " + std::to_string(v) + " (expected > 0)");
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.lin_k_heads, "linear_num_key_heads");
  positive(c.lin_v_heads, "linear_num_value_heads");
  positive(c.lin_k_dim, "linear_key_head_dim");
  positive(c.lin_v_dim, "linear_value_head_dim");
  positive(c.conv_kernel, "linear_conv_kernel_dim");
  if (c.is_moe()) {
    positive(c.num_experts, "num_experts");
    positive(c.top_k, "num_experts_per_tok");
    positive(c.moe_intermediate, "moe_intermediate_size");
    // 0 is allowed (HF builds a zero-width shared expert whose output is 0): the shared expert is skipped.
    check(c.shared_intermediate >= 0, tc.where("shared_expert_intermediate_size") + " is " +
                                          std::to_string(c.shared_intermediate) + " (expected >= 0)");
    check(c.top_k <= c.num_experts, tc.where("num_experts_per_tok") + " is " + std::to_string(c.top_k) +
                                        ", more than num_experts = " + std::to_string(c.num_experts));
  } else {
    positive(c.intermediate_size, "intermediate_size");
  }
  check(c.num_heads % c.num_kv_heads == 0,
        tc.where("num_attention_heads") + " = " + std::to_string(c.num_heads) +
            " is not a multiple of num_key_value_heads = " + std::to_string(c.num_kv_heads));
  check(c.lin_v_heads % c.lin_k_heads == 0,
        tc.where("linear_num_value_heads") + " = " + std::to_string(c.lin_v_heads) +
            " is not a multiple of linear_num_key_heads = " + std::to_string(c.lin_k_heads));
  check(c.rms_eps > 0 && std::isfinite(c.rms_eps), tc.where("rms_norm_eps") + " must be a positive number");
  check(c.rope_theta > 0 && std::isfinite(c.rope_theta),
        tc.where("rope_theta") + " must be a positive number");
  check(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1,
        tc.where("partial_rotary_factor") + " must be in (0, 1]");
  check(c.rotary_dim() >= 2 && c.rotary_dim() % 2 == 0,
        source_name + ": head_dim * partial_rotary_factor = " + std::to_string(c.rotary_dim()) +
            " (expected an even rotary dimension >= 2)");
  return c;
}

ModelConfig model_config_load(const std::string& path) {
  std::error_code ec;
  check(std::filesystem::exists(path, ec),
        path + ": not found (expected a Hugging Face checkpoint folder with config.json)");
  return model_config_parse_string(read_text_file(path), path);
}

}  // namespace deltatune

namespace deltatune {

// Any JSON library exception left (a number out of range, a type surprise) becomes a user error.
ModelConfig model_config_parse_string(const std::string& json_text, const std::string& source_name) {
  try {
    return model_config_parse_impl(json_text, source_name);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source_name + ": " + e.what());
  }
}

std::string model_config_defaults_note(const ModelConfig& c) {
  if (c.defaulted.empty()) return "";
  std::string fields, values;
  for (const std::string& d : c.defaulted) {
    if (!fields.empty()) fields += ", ", values += ", ";
    fields.append(d, 0, d.find(' '));
    values += d;
  }
  return "config.json leaves out " + fields + "; Hugging Face's defaults were used: " + values;
}

}  // namespace deltatune
