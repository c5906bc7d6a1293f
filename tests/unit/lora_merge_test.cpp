// Merged full-checkpoint export (model/merged_checkpoint.cpp) on small synthetic checkpoints. Bit-for-bit agreement with
// PEFT's merge_and_unload is checked by tests/goldens/peft/check_merged.py (needs torch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/merged_checkpoint.h"
#include "tiny_model_config.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_moe() { return testing_tiny::moe(16, 3, 6, 10, {LayerKind::LinearAttention, LayerKind::FullAttention}); }

Tensor random_tensor(Shape s, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor f = host_tensor(std::move(s));
  for (int64_t i = 0; i < f.numel(); ++i) f.ptr<float>()[i] = float(int64_t(rng() % 2001) - 1000) / 4000.f;
  return host_convert(f, dt);
}

struct Fixture {
  fs::path root;
  Fixture() {
    root = fs::temp_directory_path() / ("dt_merge_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Fixture() { fs::remove_all(root); }
};

// Writes a two-shard checkpoint with the tensors the adapter needs plus extras that must pass through.
ModelWeights write_checkpoint(const fs::path& dir, bool per_expert) {
  const ModelConfig c = tiny_moe();
  fs::create_directories(dir);
  const std::string P = "model.language_model.";
  std::vector<std::pair<std::string, Tensor>> s1, s2;
  s1.emplace_back(P + "layers.1.self_attn.q_proj.weight", random_tensor({32, 16}, DType::BF16, 1));
  s1.emplace_back(P + "layers.0.linear_attn.A_log", random_tensor({2}, DType::F32, 2));
  s1.emplace_back("model.visual.blocks.0.attn.qkv.weight", random_tensor({6, 4}, DType::BF16, 3));
  s1.emplace_back("mtp.layers.0.self_attn.q_proj.weight", random_tensor({32, 16}, DType::BF16, 4));
  if (per_expert) {
    Tensor gu = random_tensor({3, 12, 16}, DType::BF16, 5), dn = random_tensor({3, 16, 6}, DType::BF16, 6);
    for (int e = 0; e < 3; ++e) {
      const std::string ep = P + "layers.1.mlp.experts." + std::to_string(e) + ".";
      s2.emplace_back(ep + "gate_proj.weight", host_convert(gu.index(e).slice(0, 6), DType::BF16));
      s2.emplace_back(ep + "up_proj.weight", host_convert(gu.index(e).slice(6, 12), DType::BF16));
      s2.emplace_back(ep + "down_proj.weight", host_convert(dn.index(e), DType::BF16));
    }
  } else {
    s2.emplace_back(P + "layers.1.mlp.experts.gate_up_proj", random_tensor({3, 12, 16}, DType::BF16, 5));
    s2.emplace_back(P + "layers.1.mlp.experts.down_proj", random_tensor({3, 16, 6}, DType::BF16, 6));
  }
  s2.emplace_back(P + "layers.1.mlp.shared_expert.down_proj.weight", random_tensor({16, 10}, DType::F16, 7));
  safetensors_write((dir / "model-00001-of-00002.safetensors").string(), s1);
  safetensors_write((dir / "model-00002-of-00002.safetensors").string(), s2);
  std::string index = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {";
  bool first = true;
  for (auto* s : {&s1, &s2})
    for (const auto& [k, t] : *s) {
      index += std::string(first ? "" : ", ") + "\"" + k + "\": \"model-0000" + (s == &s1 ? "1" : "2") +
               "-of-00002.safetensors\"";
      first = false;
    }
  index += "}}";
  std::ofstream(dir / "model.safetensors.index.json") << index;
  std::ofstream(dir / "config.json") << "{\"model_type\": \"qwen3_5_moe\"}";
  std::ofstream(dir / "tokenizer.json") << "{}";
  ModelWeights w;
  w.config = c;
  w.dir = dir.string();
  w.key_prefix = P;
  w.reader = std::make_shared<CheckpointReader>(dir.string());
  return w;
}

LoraAdapter make_adapter() {
  LoraSpec s;
  s.r = 2;
  s.alpha = 3;
  s.modules = {"layers.1.self_attn.q_proj", "layers.1.mlp.shared_expert.down_proj"};
  s.parameters = {"layers.1.mlp.experts.gate_up_proj", "layers.1.mlp.experts.down_proj"};
  LoraAdapter a = lora_create(tiny_moe(), s, 9);
  for (LoraModule& m : a.modules)
    if (m.layer == 1) m.B = random_tensor(m.B.shape, DType::F32, 100 + m.B.numel());
  return a;
}

float ulp_bf16(float x) { return std::ldexp(1.f, std::ilogb(x == 0 ? 1e-30f : x) - 7); }

TEST(LoraMerge, MatchesTheMergeFormulaAndCarriesEverythingElse) {
  Fixture fx;
  const ModelWeights base = write_checkpoint(fx.root / "base", false);
  const LoraAdapter a = make_adapter();
  double last = -1;
  merged_checkpoint_write(base, a, (fx.root / "merged").string(), [&](double p) {
    EXPECT_GE(p, last);
    last = p;
  });
  EXPECT_EQ(last, 1.0);
  CheckpointReader out((fx.root / "merged").string());
  ASSERT_TRUE(out.sharded());
  EXPECT_EQ(out.files(), base.reader->files());
  EXPECT_EQ(out.names(), base.reader->names());
  EXPECT_TRUE(fs::exists(fx.root / "merged" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(fx.root / "merged" / "config.json"));
  for (const std::string& n : out.names()) {
    SCOPED_TRACE(n);
    EXPECT_EQ(out.entry(n).dtype, base.reader->entry(n).dtype);
    EXPECT_EQ(out.entry(n).shape, base.reader->entry(n).shape);
    EXPECT_EQ(out.file_of(n), base.reader->file_of(n));
  }
  // Untouched tensors (vision, MTP, F32 A_log) are byte-identical.
  for (const std::string n : {"model.visual.blocks.0.attn.qkv.weight", "mtp.layers.0.self_attn.q_proj.weight",
                              "model.language_model.layers.0.linear_attn.A_log"}) {
    const Tensor x = out.get(n), y = base.reader->get(n);
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes()), 0) << n;
  }
  // Modified tensors: W' = round(W + s·B@A) (experts: delta rounded first), reference in double here, so
  // allow one bf16 unit in the last place (an upper bound for the F16 tensor too) for the final rounding and
  // fp32 summation-order differences.
  for (const LoraModule& m : a.modules) {
    if (m.layer != 1) continue;
    const bool expert = m.experts > 0;
    const std::string key = "model.language_model." + m.path + (expert ? "" : ".weight");
    const std::vector<float> w0 = host_to_f32(base.reader->get(key)), w1 = host_to_f32(out.get(key));
    const int64_t E = expert ? m.experts : 1;
    int changed = 0;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t i = 0; i < m.in; ++i) {
          double d = 0;
          for (int64_t k = 0; k < m.r; ++k)
            d += expert ? double(m.B.ptr<float>()[o * m.r * E + k * E + e]) * m.A.ptr<float>()[(e * m.r + k) * m.in + i]
                        : double(m.B.ptr<float>()[o * m.r + k]) * m.A.ptr<float>()[k * m.in + i];
          const size_t j = size_t((e * m.out + o) * m.in + i);
          // Experts: PEFT casts the delta to the parameter dtype (BF16 here) before the add.
          const double delta = expert ? double(bf16_to_f32(f32_to_bf16(float(double(m.scaling) * d))))
                                      : double(m.scaling) * d;
          const float want = float(w0[j] + delta);
          EXPECT_LE(std::abs(w1[j] - want), 1.01f * ulp_bf16(want) + 1e-7f) << m.path << " e" << e << " o" << o;
          changed += w1[j] != w0[j];
        }
    EXPECT_GT(changed, 0) << m.path;
  }
}

TEST(LoraMerge, PerExpertCheckpointGetsTheSameValuesAsFused) {
  Fixture fx;
  const ModelWeights fused = write_checkpoint(fx.root / "fused", false);
  const ModelWeights split = write_checkpoint(fx.root / "split", true);
  const LoraAdapter a = make_adapter();
  merged_checkpoint_write(fused, a, (fx.root / "mf").string());
  merged_checkpoint_write(split, a, (fx.root / "ms").string());
  CheckpointReader mf((fx.root / "mf").string()), ms((fx.root / "ms").string());
  const std::string P = "model.language_model.layers.1.mlp.experts.";
  const std::vector<float> gu = host_to_f32(mf.get(P + "gate_up_proj")), dn = host_to_f32(mf.get(P + "down_proj"));
  for (int e = 0; e < 3; ++e) {
    const std::string ep = P + std::to_string(e) + ".";
    const std::vector<float> g = host_to_f32(ms.get(ep + "gate_proj.weight")), u = host_to_f32(ms.get(ep + "up_proj.weight")),
                             d = host_to_f32(ms.get(ep + "down_proj.weight"));
    EXPECT_TRUE(std::equal(g.begin(), g.end(), gu.begin() + e * 12 * 16));
    EXPECT_TRUE(std::equal(u.begin(), u.end(), gu.begin() + e * 12 * 16 + 6 * 16));
    EXPECT_TRUE(std::equal(d.begin(), d.end(), dn.begin() + e * 16 * 6));
  }
}

TEST(LoraMerge, RefusesBadTargets) {
  Fixture fx;
  const ModelWeights base = write_checkpoint(fx.root / "base", false);
  LoraAdapter a = make_adapter();
  fs::create_directories(fx.root / "full");
  std::ofstream(fx.root / "full" / "x") << "x";
  EXPECT_THROW(merged_checkpoint_write(base, a, (fx.root / "full").string()), Error);
  EXPECT_THROW(merged_checkpoint_write(base, a, base.dir), Error);
  // A module whose tensor the checkpoint lacks (layer 0 has no q_proj here) names the key.
  LoraSpec s;
  s.modules = {"layers.0.linear_attn.out_proj"};
  a = lora_create(tiny_moe(), s, 1);
  try {
    merged_checkpoint_write(base, a, (fx.root / "m2").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.linear_attn.out_proj.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(fx.root / "m2"));
}

}  // namespace
}  // namespace deltatune
