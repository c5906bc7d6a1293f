#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "../golden_files.h"
#include "backend/backend.h"
#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "model/qwen35_model.h"
#include "model/weights.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden(const std::string& name) {
  return std::string(DT_SOURCE_DIR) + "/tests/goldens/models/" + name;
}

json golden_json(const std::string& name) {
  return json::parse(read_text_file(golden(name) + "/golden_eval.json"));
}

int64_t skipped_in(const CheckpointReader& r) {
  int64_t n = 0;
  for (const auto& k : r.names()) n += model_key_skipped(k);
  return n;
}

TEST(IoWeights, DenseVl) {
  ModelWeights w = model_weights_load(golden("dense_vl"));
  const ModelConfig& c = w.config;
  EXPECT_EQ(w.key_prefix, "model.language_model.");
  EXPECT_TRUE(c.nested_text_config);
  EXPECT_FALSE(w.tied);
  EXPECT_TRUE(w.warnings.empty());
  EXPECT_NE(w.lm_head.data, w.embed.data);
  // Vision tower and the two fake mtp.* tensors are skipped, nothing else.
  EXPECT_EQ(w.skipped_tensors, skipped_in(*w.reader));
  EXPECT_GE(w.skipped_tensors, 2 + 3);
  EXPECT_TRUE(w.reader->has("mtp.fc.weight"));
  ASSERT_EQ(w.layers.size(), 5u);
  const std::vector<LayerKind> kinds = {LayerKind::LinearAttention, LayerKind::FullAttention,
                                        LayerKind::LinearAttention, LayerKind::LinearAttention,
                                        LayerKind::FullAttention};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(w.layers[i].kind, kinds[i]) << i;
  EXPECT_EQ(w.embed.shape, (Shape{512, 64}));
  EXPECT_EQ(w.embed.dtype, DType::F32);
  const LinearAttnWeights& lin = w.layers[0].lin;
  EXPECT_EQ(lin.in_proj_qkv.shape, (Shape{2 * 2 * 16 + 4 * 24, 64}));
  EXPECT_EQ(lin.in_proj_z.shape, (Shape{96, 64}));
  EXPECT_EQ(lin.in_proj_a.shape, (Shape{4, 64}));
  EXPECT_EQ(lin.conv1d.shape, (Shape{160, 4}));  // [C,1,K] viewed 2-D
  EXPECT_EQ(lin.norm.shape, (Shape{24}));
  EXPECT_EQ(lin.out_proj.shape, (Shape{64, 96}));
  const AttnWeights& at = w.layers[1].attn;
  EXPECT_EQ(at.q_proj.shape, (Shape{4 * 32 * 2, 64}));
  EXPECT_EQ(at.k_proj.shape, (Shape{2 * 32, 64}));
  EXPECT_EQ(at.o_proj.shape, (Shape{64, 128}));
  EXPECT_EQ(at.q_norm.shape, (Shape{32}));
  EXPECT_EQ(w.layers[4].mlp.down_proj.shape, (Shape{64, 96}));
  EXPECT_FALSE(w.layers[1].lin.in_proj_qkv.defined());
  // Zero-copy: the tensor is a view of the mapped file, byte-identical to the entry.
  const float* p = w.layers[2].lin.A_log.ptr<float>();
  EXPECT_TRUE(std::isfinite(p[0]));
  EXPECT_NE(p[0], 0.f);  // goldens randomise every parameter
}

TEST(IoWeights, MoeTiedFlatWithInterval) {
  ModelWeights w = model_weights_load(golden("moe_tied"));
  EXPECT_EQ(w.key_prefix, "model.");
  EXPECT_TRUE(w.tied);
  EXPECT_TRUE(w.warnings.empty());
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.skipped_tensors, 0);
  EXPECT_FALSE(w.experts_per_expert_layout);
  ASSERT_EQ(w.layers.size(), 4u);
  EXPECT_EQ(w.layers[1].kind, LayerKind::FullAttention);
  EXPECT_EQ(w.layers[2].kind, LayerKind::LinearAttention);
  const MoeWeights& m = w.layers[0].moe;
  EXPECT_EQ(m.router.shape, (Shape{4, 64}));
  EXPECT_EQ(m.gate_up.shape, (Shape{4, 64, 64}));
  EXPECT_EQ(m.down.shape, (Shape{4, 64, 32}));
  EXPECT_EQ(m.shared.gate_proj.shape, (Shape{48, 64}));
  EXPECT_EQ(m.shared.down_proj.shape, (Shape{64, 48}));
  EXPECT_EQ(m.shared_gate.shape, (Shape{1, 64}));
  EXPECT_FALSE(w.layers[0].mlp.gate_proj.defined());
}

TEST(IoWeights, MoeVlQuirks) {
  // VL MoE, vision tower under the older top-level visual.* prefix, mtp.*, zero-width shared expert.
  ModelWeights w = model_weights_load(golden("moe_vl_quirks"));
  EXPECT_EQ(w.key_prefix, "model.language_model.");
  EXPECT_TRUE(w.tied);
  EXPECT_TRUE(w.warnings.empty());
  EXPECT_EQ(w.skipped_tensors, skipped_in(*w.reader));
  EXPECT_TRUE(w.reader->has("visual.patch_embed.proj.weight"));
  EXPECT_TRUE(model_key_skipped("visual.patch_embed.proj.weight"));
  EXPECT_GE(w.skipped_tensors, 2 + 3);
  EXPECT_EQ(w.config.shared_intermediate, 0);
  EXPECT_EQ(w.layers[0].kind, LayerKind::FullAttention);
  EXPECT_EQ(w.layers[0].moe.shared.gate_proj.shape, (Shape{0, 32}));
  EXPECT_EQ(w.layers[0].moe.shared.down_proj.shape, (Shape{32, 0}));
}

TEST(IoWeights, DenseBf16Sharded) {
  ModelWeights w = model_weights_load(golden("dense_bf16"));
  EXPECT_TRUE(w.reader->sharded());
  EXPECT_EQ(w.reader->files().size(), 2u);
  EXPECT_FALSE(w.tied);
  EXPECT_EQ(w.embed.dtype, DType::BF16);
  EXPECT_EQ(w.config.lin_v_heads / w.config.lin_k_heads, 3);
  EXPECT_DOUBLE_EQ(w.config.partial_rotary_factor, 0.5);  // legacy top-level key
  EXPECT_DOUBLE_EQ(w.config.rope_theta, 1e6);
  EXPECT_EQ(w.layers[0].lin.in_proj_b.shape, (Shape{6, 64}));
  EXPECT_EQ(w.layers[0].lin.in_proj_qkv.shape, (Shape{2 * 32 + 96, 64}));
  for (const auto& L : w.layers) {
    const Tensor& t = L.kind == LayerKind::FullAttention ? L.attn.q_proj : L.lin.in_proj_qkv;
    EXPECT_EQ(t.dtype, DType::BF16);
  }
}

TEST(IoWeights, PerExpertStackingMatchesHfFused) {
  ModelWeights w = model_weights_load(golden("moe_per_expert"));
  EXPECT_TRUE(w.experts_per_expert_layout);
  EXPECT_FALSE(w.tied);
  const json g = golden_json("moe_per_expert");
  ASSERT_GT(g["fused_expert_probes"].size(), 0u);
  for (const auto& p : g["fused_expert_probes"]) {
    const std::string key = p["key"];
    const int layer = std::stoi(key.substr(std::string("model.layers.").size()));
    const MoeWeights& m = w.layers[static_cast<size_t>(layer)].moe;
    const Tensor& t = key.find("gate_up_proj") != std::string::npos ? m.gate_up : m.down;
    const auto idx = p["index"].get<std::vector<int64_t>>();
    const int64_t flat = (idx[0] * t.dim(1) + idx[1]) * t.dim(2) + idx[2];
    // Exact: stacking copies bytes, HF's fused tensor holds the same F32 values.
    EXPECT_EQ(t.ptr<float>()[flat], p["value"].get<float>()) << key << " " << p["index"].dump();
  }
}

// ---- error paths on edited copies of a golden checkpoint ----

class TempCheckpoint {
 public:
  explicit TempCheckpoint(const std::string& from) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("dt_io_w_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(golden(from) + "/config.json", dir_ / "config.json");
    CheckpointReader r(golden(from));
    for (const auto& n : r.names()) tensors_.emplace_back(n, r.get(n));
  }
  ~TempCheckpoint() { fs::remove_all(dir_); }
  std::vector<std::pair<std::string, Tensor>>& tensors() { return tensors_; }
  void edit_config(const std::function<void(json&)>& fn) {
    json c = json::parse(read_text_file((dir_ / "config.json").string()));
    fn(c);
    write_text_file_atomic((dir_ / "config.json").string(), c.dump());
  }
  std::string write() {
    safetensors_write((dir_ / "model.safetensors").string(), tensors_);
    return dir_.string();
  }

 private:
  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

void expect_load_error(const std::string& dir, const std::vector<std::string>& parts) {
  try {
    model_weights_load(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(IoWeights, MissingTensorNamed) {
  TempCheckpoint t("moe_tied");
  auto& ts = t.tensors();
  std::erase_if(ts, [](const auto& kv) { return kv.first == "model.layers.2.linear_attn.dt_bias"; });
  expect_load_error(t.write(), {"model.layers.2.linear_attn.dt_bias", "[2]"});
}

TEST(IoWeights, WrongShapeNamesKeyAndShapes) {
  TempCheckpoint t("moe_tied");
  t.edit_config([](json& c) { c["moe_intermediate_size"] = 16; });
  expect_load_error(t.write(),
                    {"model.layers.0.mlp.experts.gate_up_proj", "[4, 64, 64]", "expected [4, 32, 64]"});
}

// A size field config.json leaves out takes Hugging Face's default: the checkpoint loads where its tensors
// fit it, and the shape error names the defaulted field where they do not.
TEST(IoWeights, MissingConfigFieldsTakeHfDefaults) {
  {
    TempCheckpoint t("moe_tied");
    t.edit_config(
        [](json& c) { c.erase("linear_conv_kernel_dim"); });  // the golden's value is HF's default 4
    EXPECT_EQ(model_weights_load(t.write()).config.conv_kernel, 4);
  }
  TempCheckpoint t("moe_tied");
  t.edit_config([](json& c) { c.erase("moe_intermediate_size"); });
  expect_load_error(t.write(), {"model.layers.0.mlp.experts.gate_up_proj", "expected [4, 1024, 64]",
                                "leaves out moe_intermediate_size", "moe_intermediate_size = 512"});
}

TEST(IoWeights, UnknownTextTensorIsAnError) {
  TempCheckpoint t("moe_tied");
  t.tensors().emplace_back("model.layers.0.mlp.mystery.weight", host_tensor({2}));
  expect_load_error(t.write(), {"unexpected tensor 'model.layers.0.mlp.mystery.weight'"});
}

TEST(IoWeights, TieFlagMismatchWarnsAndFollowsCheckpoint) {
  TempCheckpoint t("moe_tied");
  t.edit_config([](json& c) { c["tie_word_embeddings"] = false; });
  ModelWeights w = model_weights_load(t.write());
  EXPECT_TRUE(w.tied);
  ASSERT_EQ(w.warnings.size(), 1u);
  EXPECT_NE(w.warnings[0].find("tie_word_embeddings"), std::string::npos);
}

// Base-model checkpoints (Qwen3_5TextModel.save_pretrained: no prefix; Qwen3_5Model: language_model.* and
// visual.*) load into HF's causal-LM classes with nothing missing when tied; the same tensors under those
// prefixes must give the golden's HF loss.
TEST(IoWeights, BaseModelKeyLayouts) {
  struct Case {
    std::string from, strip, add;
  };
  for (const Case& c : {Case{"moe_tied", "model.", ""}, Case{"dense_vl", "model.", ""}}) {
    SCOPED_TRACE(c.from);
    TempCheckpoint t(c.from);
    for (auto& [name, tensor] : t.tensors())
      if (name.rfind(c.strip, 0) == 0) name = c.add + name.substr(c.strip.size());
    const std::string dir = t.write();
    ModelWeights w = model_weights_load(dir);
    EXPECT_EQ(w.key_prefix, c.from == "moe_tied" ? "" : "language_model.");
    EXPECT_EQ(w.tied, c.from == "moe_tied");
    if (c.from == "dense_vl") {
      EXPECT_TRUE(w.reader->has("visual.patch_embed.proj.weight"));
      EXPECT_GE(w.skipped_tensors, 5);
    }
    auto be = make_cpu_backend();
    Qwen35Model model(w, *be);
    const auto seqs = testing_goldens::read_jsonl(golden(c.from) + "/golden_eval.jsonl");
    const auto [sum, n] = testing_goldens::loss_each_sequence(model, seqs);
    const double hf = golden_json(c.from)["loss"].get<double>();
    EXPECT_NEAR(sum / n, hf, 1e-4 * hf);
  }
}

TEST(IoWeights, IntegerWeightRejected) {
  TempCheckpoint t("moe_tied");
  for (auto& [n, v] : t.tensors())
    if (n == "model.norm.weight") v = host_tensor(v.shape, DType::I32);
  expect_load_error(t.write(), {"model.norm.weight", "dtype I32"});
}

}  // namespace
}  // namespace deltatune
