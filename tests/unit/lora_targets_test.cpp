// LoRA target selection and init (lora/lora.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "deltatune/run_config.h"
#include "lora/lora.h"
#include "train/lora_spec.h"

namespace deltatune {
namespace {

ModelConfig tiny(bool moe) {
  ModelConfig c;
  c.model_type = moe ? "qwen3_5_moe" : "qwen3_5";
  c.hidden_size = 64;
  c.num_layers = 4;
  c.intermediate_size = 96;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.lin_k_heads = 2;
  c.lin_v_heads = 4;
  c.lin_k_dim = 16;
  c.lin_v_dim = 8;
  if (moe) {
    c.num_experts = 6;
    c.moe_intermediate = 24;
    c.shared_intermediate = 40;
  }
  c.layer_types = {LayerKind::LinearAttention, LayerKind::FullAttention, LayerKind::LinearAttention,
                   LayerKind::FullAttention};
  return c;
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoraTargets, GroupsOfModel) {
  EXPECT_EQ(lora_groups_of(tiny(false)), (std::vector<std::string>{"attn", "linear_attn", "mlp"}));
  EXPECT_EQ(lora_groups_of(tiny(true)),
            (std::vector<std::string>{"attn", "linear_attn", "shared_expert", "experts"}));
  EXPECT_EQ(lora_default_groups(tiny(true)), (std::vector<std::string>{"attn", "linear_attn", "shared_expert"}));
  EXPECT_EQ(lora_group_suffixes("linear_attn").size(), 5u);
  EXPECT_THROW(lora_group_suffixes("mlps"), Error);
}

TEST(LoraTargets, InventoryShapesFollowConfig) {
  const auto inv = lora_inventory(tiny(true));
  auto get = [&](const std::string& p) {
    for (const auto& m : inv)
      if (m.path == p) return m;
    ADD_FAILURE() << "no module " << p;
    return LoraModule{};
  };
  // q_proj carries query and gate: out = nH*hd*2.
  EXPECT_EQ(get("layers.1.self_attn.q_proj").out, 128);
  EXPECT_EQ(get("layers.1.self_attn.k_proj").out, 32);
  EXPECT_EQ(get("layers.1.self_attn.o_proj").in, 64);
  EXPECT_EQ(get("layers.0.linear_attn.in_proj_qkv").out, 2 * 32 + 32);  // conv_dim
  EXPECT_EQ(get("layers.0.linear_attn.in_proj_z").out, 32);
  EXPECT_EQ(get("layers.0.linear_attn.in_proj_a").out, 4);
  EXPECT_EQ(get("layers.0.linear_attn.out_proj").in, 32);
  EXPECT_EQ(get("layers.2.mlp.shared_expert.down_proj").in, 40);
  const LoraModule gu = get("layers.3.mlp.experts.gate_up_proj");
  EXPECT_EQ(gu.experts, 6);
  EXPECT_EQ(gu.in, 64);
  EXPECT_EQ(gu.out, 48);
  EXPECT_EQ(get("layers.3.mlp.experts.down_proj").in, 24);
  // Attention modules only on full-attention layers.
  for (const auto& m : inv) EXPECT_FALSE(m.path == "layers.0.self_attn.q_proj");
}

TEST(LoraTargets, DefaultIsEveryLinearGroupExceptExperts) {
  RunConfig rc;
  LoraAdapter a = lora_create(tiny(true), lora_spec_from_run_config(rc), 1);
  const auto per = a.params_per_group();
  EXPECT_EQ(per.count("experts"), 0u);
  EXPECT_GT(per.at("shared_expert"), 0);
  EXPECT_GT(per.at("attn"), 0);
  EXPECT_GT(per.at("linear_attn"), 0);
  // 2 full-attention layers x 4 + 2 linear layers x 5 + 4 layers x 3 shared-expert projections.
  EXPECT_EQ(a.modules.size(), 8u + 10u + 12u);
}

TEST(LoraTargets, ExplicitSuffixesUsePeftMatching) {
  LoraSpec s;
  s.modules = {"q_proj", "layers.0.linear_attn.out_proj", "model.language_model.layers.2.mlp.up_proj"};
  LoraAdapter a = lora_create(tiny(false), s, 1);
  ASSERT_EQ(a.modules.size(), 4u);
  EXPECT_NE(a.find("layers.1.self_attn.q_proj"), nullptr);
  EXPECT_NE(a.find("layers.3.self_attn.q_proj"), nullptr);
  EXPECT_NE(a.find("layers.0.linear_attn.out_proj"), nullptr);
  EXPECT_NE(a.find("layers.2.mlp.up_proj"), nullptr);
  // Dot boundary: "proj" is not a suffix of any module name component.
  s.modules = {"proj"};
  EXPECT_NE(what([&] { lora_create(tiny(false), s, 1); }).find("lora_target_modules: 'proj'"), std::string::npos);
}

TEST(LoraTargets, ExpertParametersShapesAndScaling) {
  LoraSpec s;
  s.r = 3;
  s.alpha = 9;
  s.parameters = {"mlp.experts.gate_up_proj", "experts.down_proj"};
  LoraAdapter a = lora_create(tiny(true), s, 5);
  ASSERT_EQ(a.modules.size(), 8u);
  const LoraModule* gu = a.find("layers.0.mlp.experts.gate_up_proj");
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->A.shape, (Shape{3 * 6, 64}));
  EXPECT_EQ(gu->B.shape, (Shape{48, 3 * 6}));
  EXPECT_FLOAT_EQ(gu->scaling, 3.0f);
  s.rslora = true;
  a = lora_create(tiny(true), s, 5);
  EXPECT_FLOAT_EQ(a.modules[0].scaling, static_cast<float>(9 / std::sqrt(3.0)));
}

TEST(LoraTargets, InitIsDeterministicBoundedAndBZero) {
  LoraSpec s;
  s.groups = {"attn", "mlp"};
  LoraAdapter a = lora_create(tiny(false), s, 42), b = lora_create(tiny(false), s, 42), c = lora_create(tiny(false), s, 43);
  ASSERT_EQ(a.modules.size(), b.modules.size());
  bool differs = false;
  for (size_t i = 0; i < a.modules.size(); ++i) {
    const LoraModule& m = a.modules[i];
    const float bound = 1.f / std::sqrt(float(m.in));
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < m.A.numel(); ++j) {
      const float v = m.A.ptr<float>()[j];
      EXPECT_LE(std::abs(v), bound);
      EXPECT_EQ(v, b.modules[i].A.ptr<float>()[j]);
      differs |= v != c.modules[i].A.ptr<float>()[j];
      sum += v;
      sq += double(v) * v;
    }
    // U(-b, b): mean 0, variance b²/3; loose 5-sigma-ish bounds for a few hundred samples.
    const double n = double(m.A.numel());
    EXPECT_NEAR(sum / n, 0.0, 5 * bound / std::sqrt(3 * n));
    EXPECT_NEAR(sq / n, bound * bound / 3.0, 0.25 * bound * bound / 3.0);
    for (int64_t j = 0; j < m.B.numel(); ++j) EXPECT_EQ(m.B.ptr<float>()[j], 0.f);
  }
  EXPECT_TRUE(differs);
  // A module's init does not depend on which other groups are selected.
  LoraSpec only;
  only.groups = {"mlp"};
  LoraAdapter d = lora_create(tiny(false), only, 42);
  const LoraModule* m1 = a.find("layers.2.mlp.down_proj");
  const LoraModule* m2 = d.find("layers.2.mlp.down_proj");
  ASSERT_TRUE(m1 && m2);
  EXPECT_EQ(std::memcmp(m1->A.data, m2->A.data, m1->A.nbytes()), 0);
}

TEST(LoraTargets, ErrorsNameTheSetting) {
  LoraSpec s;
  s.groups = {"experts"};
  EXPECT_NE(what([&] { lora_create(tiny(false), s, 1); }).find("lora_target_groups: group 'experts'"),
            std::string::npos);
  s.groups = {"atn"};
  EXPECT_NE(what([&] { lora_create(tiny(false), s, 1); }).find("unknown group 'atn'"), std::string::npos);
  s.groups = {};
  s.parameters = {"mlp.experts.gate_up_proj"};
  EXPECT_NE(what([&] { lora_create(tiny(false), s, 1); }).find("lora_target_parameters"), std::string::npos);
  s.parameters = {};
  s.modules = {"experts.gate_up_proj"};
  EXPECT_NE(what([&] { lora_create(tiny(true), s, 1); }).find("use lora_target_parameters"), std::string::npos);
  s.modules = {"q_proj"};
  s.r = 0;
  EXPECT_NE(what([&] { lora_create(tiny(true), s, 1); }).find("lora_r"), std::string::npos);
}

TEST(LoraTargets, SpecFromRunConfig) {
  RunConfig rc;
  rc.lora_r = 8;
  rc.lora_alpha = 16;
  rc.use_rslora = true;
  rc.lora_dropout = 0.1;
  rc.lora_target_groups = {"attn"};
  rc.lora_target_parameters = {"experts.down_proj"};
  const LoraSpec s = lora_spec_from_run_config(rc);
  EXPECT_EQ(s.r, 8);
  EXPECT_EQ(s.alpha, 16);
  EXPECT_TRUE(s.rslora);
  EXPECT_EQ(s.dropout, 0.1);
  EXPECT_EQ(s.groups, std::vector<std::string>{"attn"});
  EXPECT_EQ(s.parameters, std::vector<std::string>{"experts.down_proj"});
  const LoraAdapter a = lora_create(tiny(true), s, 3);
  EXPECT_EQ(a.modules.size(), 8u + 4u);
  EXPECT_EQ(a.trainable_params(), a.params_per_group().at("attn") + a.params_per_group().at("experts"));
}

}  // namespace
}  // namespace deltatune

#include "backend/backend.h"

namespace deltatune {
namespace {

TEST(LoraTargets, ToBackendKeepsValuesAndZeroesGradients) {
  auto be = make_cpu_backend(1);
  LoraSpec s;
  s.groups = {"attn"};
  LoraAdapter a = lora_create(tiny(false), s, 7);
  const std::vector<float> a0 = host_to_f32(a.modules[0].A);
  lora_to_backend(a, *be);
  const LoraModule& m = a.modules[0];
  EXPECT_EQ(host_to_f32(be->download(m.A, DType::F32)), a0);
  EXPECT_EQ(m.gA.shape, m.A.shape);
  EXPECT_EQ(m.gB.shape, m.B.shape);
  be->fill(a.modules[0].gA, 3.f);
  lora_zero_grad(a, *be);
  for (float v : host_to_f32(be->download(m.gA, DType::F32))) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace deltatune
