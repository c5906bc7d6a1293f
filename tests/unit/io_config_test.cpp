#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/model_config.h"

namespace deltatune {
namespace {

using nlohmann::json;

json flat_dense() {
  return json::parse(R"({
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 5, "intermediate_size": 96,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 24, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": true},
    "tie_word_embeddings": false, "eos_token_id": 7, "pad_token_id": null
  })");
}

json flat_moe() {
  json j = flat_dense();
  j["model_type"] = "qwen3_5_moe";
  j["architectures"] = {"Qwen3_5MoeForCausalLM"};
  j.erase("intermediate_size");
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["shared_expert_intermediate_size"] = 48;
  j["num_hidden_layers"] = 4;
  return j;
}

ModelConfig parse(const json& j) {
  return model_config_parse_string(j.dump(), "test/config.json");
}

void expect_error(const json& j, const std::vector<std::string>& parts) {
  try {
    parse(j);
    FAIL() << "no error for " << j.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test/config.json"), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(IoConfig, FlatDenseWithRopeParameters) {
  ModelConfig c = parse(flat_dense());
  EXPECT_EQ(c.model_type, "qwen3_5");  // *_text normalised
  EXPECT_EQ(c.architecture, "Qwen3_5ForCausalLM");
  EXPECT_FALSE(c.nested_text_config);
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.key_dim(), 32);
  EXPECT_EQ(c.value_dim(), 96);
  EXPECT_EQ(c.conv_dim(), 160);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_EQ(c.pad_token_id, -1);
  // No layer_types: full_attention_interval default 4 -> layer 3 only (of 5).
  ASSERT_EQ(c.layer_types.size(), 5u);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(c.layer_types[i], i == 3 ? LayerKind::FullAttention : LayerKind::LinearAttention) << i;
}

TEST(IoConfig, NestedTextConfig) {
  json text = flat_dense();
  text.erase("architectures");
  text["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "linear_attention",
                         "full_attention"};
  text.erase("tie_word_embeddings");
  text["eos_token_id"] = json::array({11, 12});
  json root = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
               {"model_type", "qwen3_5"},
               {"text_config", text},
               {"vision_config", {{"model_type", "qwen3_5_vision"}, {"depth", 1}}},
               {"tie_word_embeddings", true},
               {"vocab_size", 9999}};  // top-level text keys are not the text model's
  ModelConfig c = parse(root);
  EXPECT_TRUE(c.nested_text_config);
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_TRUE(c.tie_word_embeddings_flag);
  EXPECT_EQ(c.eos_token_id, 11);
  const std::vector<LayerKind> want = {LayerKind::LinearAttention, LayerKind::FullAttention,
                                       LayerKind::LinearAttention, LayerKind::LinearAttention,
                                       LayerKind::FullAttention};
  EXPECT_EQ(c.layer_types, want);
}

TEST(IoConfig, NestedMoeTextType) {
  json text = flat_moe();
  text["model_type"] = "qwen3_5_moe_text";
  json root = {{"model_type", "qwen3_5_moe"}, {"text_config", text}};
  ModelConfig c = parse(root);
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.moe_intermediate, 32);
  EXPECT_EQ(c.shared_intermediate, 48);
  EXPECT_EQ(c.architecture, "");

  root["text_config"]["model_type"] = "qwen3_5_text";
  expect_error(root, {"text_config.model_type", "does not match"});
}

TEST(IoConfig, LegacyRopeKeysAndInterval) {
  json j = flat_moe();
  j.erase("rope_parameters");
  j["rope_theta"] = 5e6;
  j["partial_rotary_factor"] = 0.5;
  j["full_attention_interval"] = 2;
  ModelConfig c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e6);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_EQ(c.layer_types, (std::vector<LayerKind>{LayerKind::LinearAttention, LayerKind::FullAttention,
                                                   LayerKind::LinearAttention, LayerKind::FullAttention}));
  // rope_parameters wins over the legacy keys; a missing partial factor there falls back to the legacy one.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e7}};
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  // Nothing at all: HF's defaults (theta 10000, factor 0.25).
  j.erase("rope_parameters");
  j.erase("rope_theta");
  j.erase("partial_rotary_factor");
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  // Legacy layer type spellings are remapped like HF does.
  j["layer_types"] = {"mamba", "mamba", "mamba", "attention"};
  c = parse(j);
  EXPECT_EQ(c.layer_types.back(), LayerKind::FullAttention);
}

// What transformers' Qwen3.5 configs do with the same file (found by fuzzing random HF checkpoints).
TEST(IoConfig, HfQuirks) {
  // A non-empty legacy rope_scaling dict replaces rope_parameters (convert_rope_params_to_dict); an empty one
  // does not.
  json j = flat_dense();
  j["rope_scaling"] = {{"rope_type", "default"}, {"rope_theta", 5000.0}, {"partial_rotary_factor", 1.0}};
  ModelConfig c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  j["rope_scaling"] = json::object();
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  j["rope_scaling"] = nullptr;
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 1e6);
  // "swish" is SiLU in HF's ACT2FN.
  j["hidden_act"] = "swish";
  EXPECT_NO_THROW(parse(j));
  j["attention_bias"] = false;
  EXPECT_NO_THROW(parse(j));
  // A zero-width shared expert is valid in HF (it adds nothing).
  json m = flat_moe();
  m["shared_expert_intermediate_size"] = 0;
  c = parse(m);
  EXPECT_EQ(c.shared_intermediate, 0);
  EXPECT_FALSE(c.has_shared_expert());
  EXPECT_TRUE(parse(flat_moe()).has_shared_expert());
  m["shared_expert_intermediate_size"] = -1;
  expect_error(m, {"shared_expert_intermediate_size", "-1", ">= 0"});
}

// Settings HF runs but whose math we do not implement: refused, naming the field and what is supported.
TEST(IoConfig, UnsupportedMathIsRefused) {
  json j = flat_dense();
  j["hidden_act"] = "gelu";
  expect_error(j, {"field hidden_act", "gelu", "only \"silu\""});
  json text = flat_dense();
  text["hidden_act"] = "gelu_pytorch_tanh";
  expect_error(json{{"model_type", "qwen3_5"}, {"text_config", text}},
               {"text_config.hidden_act", "gelu_pytorch_tanh"});
  j = flat_moe();
  j["attention_bias"] = true;
  expect_error(j, {"field attention_bias", "only false"});
}

TEST(IoConfig, NestedLegacyRopeAtTextLevel) {
  json text = flat_dense();
  text.erase("rope_parameters");
  text["rope_theta"] = 3e6;
  json root = {{"model_type", "qwen3_5"}, {"text_config", text}};
  EXPECT_DOUBLE_EQ(parse(root).rope_theta, 3e6);
}

// Size fields config.json leaves out take the class defaults of transformers' Qwen3_5TextConfig and
// Qwen3_5MoeTextConfig (configuration_qwen3_5.py, configuration_qwen3_5_moe.py), as from_pretrained does, and
// are listed for the weights' shape errors.
// A config.json key left out, the ModelConfig field it sets and transformers' class default for it.
struct HfDefault {
  const char* key;
  int64_t ModelConfig::*field;
  int64_t value;
};

// Parses `base` without the listed keys and expects each field to hold its default.
ModelConfig parse_without(json base, const std::vector<HfDefault>& defaults) {
  for (const HfDefault& d : defaults) base.erase(d.key);
  const ModelConfig c = parse(base);
  for (const HfDefault& d : defaults) EXPECT_EQ(c.*d.field, d.value) << d.key;
  EXPECT_EQ(c.defaulted.size(), defaults.size());
  return c;
}

TEST(IoConfig, MissingSizeFieldsTakeHfClassDefaults) {
  using M = ModelConfig;
  const ModelConfig d = parse_without(flat_dense(), {{"vocab_size", &M::vocab_size, 248320},
                                                     {"hidden_size", &M::hidden_size, 4096},
                                                     {"num_hidden_layers", &M::num_layers, 32},
                                                     {"intermediate_size", &M::intermediate_size, 12288},
                                                     {"num_attention_heads", &M::num_heads, 16},
                                                     {"num_key_value_heads", &M::num_kv_heads, 4},
                                                     {"head_dim", &M::head_dim, 256},
                                                     {"linear_num_key_heads", &M::lin_k_heads, 16},
                                                     {"linear_num_value_heads", &M::lin_v_heads, 32},
                                                     {"linear_key_head_dim", &M::lin_k_dim, 128},
                                                     {"linear_value_head_dim", &M::lin_v_dim, 128},
                                                     {"linear_conv_kernel_dim", &M::conv_kernel, 4}});
  ASSERT_EQ(d.layer_types.size(), 32u);  // HF's full_attention_interval 4 over the default 32 layers
  EXPECT_EQ(d.layer_types[3], LayerKind::FullAttention);
  EXPECT_EQ(d.defaulted[0], "vocab_size = 248320");
  parse_without(flat_moe(), {{"hidden_size", &M::hidden_size, 2048},
                             {"num_hidden_layers", &M::num_layers, 40},
                             {"num_key_value_heads", &M::num_kv_heads, 2},
                             {"num_experts", &M::num_experts, 256},
                             {"num_experts_per_tok", &M::top_k, 8},
                             {"moe_intermediate_size", &M::moe_intermediate, 512},
                             {"shared_expert_intermediate_size", &M::shared_intermediate, 512}});
  json text = flat_dense();
  text.erase("head_dim");
  const ModelConfig n = parse(json{{"model_type", "qwen3_5"}, {"text_config", text}});
  EXPECT_EQ(n.head_dim, 256);
  ASSERT_EQ(n.defaulted.size(), 1u);
  EXPECT_EQ(n.defaulted[0], "text_config.head_dim = 256");
  EXPECT_TRUE(parse(flat_dense()).defaulted.empty());
}

TEST(IoConfig, Errors) {
  expect_error(json::parse(R"({"model_type": "llama"})"), {"unsupported model_type", "llama"});
  expect_error(json::parse("{}"), {"model_type", "missing"});
  {
    json j = flat_dense();
    j["linear_num_value_heads"] = 3;
    expect_error(j, {"linear_num_value_heads", "multiple of linear_num_key_heads"});
  }
  {
    json j = flat_dense();
    j["layer_types"] = {"linear_attention", "full_attention"};
    expect_error(j, {"layer_types", "2 entries", "5"});
  }
  {
    json j = flat_dense();
    j["layer_types"] = {"linear_attention", "full_attention", "sliding_attention", "linear_attention",
                        "full_attention"};
    expect_error(j, {"layer_types[2]", "sliding_attention"});
  }
  {
    json j = flat_dense();
    j["hidden_size"] = "64";
    expect_error(j, {"hidden_size", "expected an integer"});
  }
  {
    json j = flat_dense();
    j["rope_parameters"]["rope_type"] = "yarn";
    expect_error(j, {"rope_type", "yarn"});
  }
  {
    json j = flat_moe();
    j["num_experts_per_tok"] = 5;
    expect_error(j, {"num_experts_per_tok"});
  }
  try {
    model_config_parse_string("{not json", "x/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x/config.json: not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model_config_load("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace deltatune
