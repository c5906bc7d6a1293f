// PEFT adapter folders in and out (lora/peft_io.cpp), against adapters made by PEFT itself
// (tests/goldens/peft/make_adapters.py). Set DT_PEFT_OUT to keep what we write for
// tests/goldens/peft/check_all.sh (PEFT loads it and compares logits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>
#include <algorithm>

#include "core/error.h"
#include "deltatune/export.h"
#include "lora/lora.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/merged_checkpoint.h"
#include "io/model_config.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kFixtures = std::string(DT_SOURCE_DIR) + "/tests/goldens/peft/fixtures/";
const std::vector<std::string> kCases = {"dense_cg",  "dense_clm_patterns", "dense_f32",        "moe_all",
                                          "moe_down", "moe_layers_params",  "dense_unmatched",  "moe_regex_params",
                                          "moe_zero_shared"};

// The fixture's tensors that carry an update: the zero-sized shared expert of a model without one is skipped.
std::map<std::string, std::pair<Shape, std::vector<float>>> effective(
    std::map<std::string, std::pair<Shape, std::vector<float>>> t, const ModelConfig& cfg) {
  if (cfg.is_moe() && !cfg.has_shared_expert())
    std::erase_if(t, [](const auto& kv) { return kv.first.find(".mlp.shared_expert.") != std::string::npos; });
  return t;
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

std::string fixture_class_prefix(const std::string& c) {
  return read_json(kFixtures + c + "/fixture.json")["class"] == "causal_lm" ? "model." : "model.language_model.";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("dt_peft_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

fs::path out_dir_for(const std::string& c, const TempDir& tmp) {
  const char* env = std::getenv("DT_PEFT_OUT");
  return env && *env ? fs::path(env) / c / "ours" : tmp.path / c;
}

// Key -> F32 values of an adapter file.
std::map<std::string, std::pair<Shape, std::vector<float>>> tensors_of(const fs::path& file) {
  SafetensorsFile f(file.string());
  std::map<std::string, std::pair<Shape, std::vector<float>>> out;
  for (const TensorEntry& e : f.entries()) out[e.name] = {e.shape, host_to_f32(f.get(e.name))};
  return out;
}

void copy_fixture(const std::string& c, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(kFixtures + c + "/adapter", to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

TEST(PeftIo, ClassPrefix) {
  ModelWeights w;
  w.key_prefix = "model.language_model.";
  EXPECT_EQ(peft_class_prefix(w.key_prefix, "auto"), "model.language_model.");
  EXPECT_EQ(peft_class_prefix(w.key_prefix, "causal_lm"), "model.");
  w.key_prefix = "model.";
  EXPECT_EQ(peft_class_prefix(w.key_prefix, "conditional_generation"), "model.language_model.");
  EXPECT_EQ(peft_class_prefix(w.key_prefix, "auto"), "model.");
  EXPECT_NE(what([&] { peft_class_prefix(w.key_prefix, "seq2seq"); }).find("model_class"), std::string::npos);
}

// PEFT-made adapter -> read -> write -> same key set, shapes, values; config fields that matter agree.
TEST(PeftIo, ReadsPeftAdaptersAndWritesThemBackUnchanged) {
  TempDir tmp("rt");
  for (const std::string& c : kCases) {
    SCOPED_TRACE(c);
    const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
    const fs::path ref = kFixtures + c + "/adapter";
    const LoraAdapter a = peft_adapter_read(ref.string(), cfg);
    const json rc = read_json(ref / "adapter_config.json");
    EXPECT_EQ(a.r, rc["r"].get<int>());
    EXPECT_EQ(a.alpha, rc["lora_alpha"].get<double>());
    EXPECT_EQ(a.modules.size() * 2, effective(tensors_of(ref / "adapter_model.safetensors"), cfg).size());

    const fs::path out = out_dir_for(c, tmp);
    peft_adapter_write(a, cfg, fixture_class_prefix(c), "tiny-" + c, out.string());
    const auto want = effective(tensors_of(ref / "adapter_model.safetensors"), cfg);
    const auto got = tensors_of(out / "adapter_model.safetensors");
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [k, v] : want) {
      auto it = got.find(k);
      ASSERT_NE(it, got.end()) << "missing key " << k;
      EXPECT_EQ(it->second.first, v.first) << k;
      EXPECT_EQ(it->second.second, v.second) << k;  // F32 (or BF16 widened): exact
    }
    SafetensorsFile written((out / "adapter_model.safetensors").string());
    EXPECT_EQ(written.metadata().at("format"), "pt");
    for (const TensorEntry& e : written.entries()) EXPECT_EQ(e.dtype, DType::F32) << e.name;

    const json oc = read_json(out / "adapter_config.json");
    EXPECT_EQ(oc["peft_type"], "LORA");
    EXPECT_EQ(oc["task_type"], "CAUSAL_LM");
    EXPECT_TRUE(oc["r"].is_number_integer());
    EXPECT_EQ(oc["init_lora_weights"], true);
    EXPECT_EQ(oc["use_rslora"], rc["use_rslora"]);
    EXPECT_EQ(oc["lora_dropout"], 0.0);
    for (const char* k : {"use_dora", "lora_bias", "fan_in_fan_out"}) EXPECT_EQ(oc[k], false) << k;
    // Every field PEFT writes is there (older/newer PEFT drop what they do not know).
    for (auto it = rc.begin(); it != rc.end(); ++it) EXPECT_TRUE(oc.contains(it.key())) << it.key();
    // PEFT keeps what the user wrote ("experts.down_proj", or a name this model lacks); we write the
    // unambiguous "mlp." form of each adapted expert parameter.
    std::set<std::string> expert_suffixes;
    for (const LoraModule& m : a.modules)
      if (m.experts > 0) expert_suffixes.insert(m.suffix);
    if (expert_suffixes.empty()) EXPECT_TRUE(oc["target_parameters"].is_null());
    else EXPECT_EQ(oc["target_parameters"].size(), expert_suffixes.size());
    // Reading ours gives the same adapter (paths, ranks, scalings, values).
    const LoraAdapter b = peft_adapter_read(out.string(), cfg);
    ASSERT_EQ(b.modules.size(), a.modules.size());
    for (const LoraModule& m : a.modules) {
      const LoraModule* n = b.find(m.path);
      ASSERT_NE(n, nullptr) << m.path;
      EXPECT_EQ(n->r, m.r) << m.path;
      EXPECT_EQ(n->scaling, m.scaling) << m.path;
      EXPECT_EQ(host_to_f32(n->A), host_to_f32(m.A)) << m.path;
      EXPECT_EQ(host_to_f32(n->B), host_to_f32(m.B)) << m.path;
    }
  }
}

TEST(PeftIo, PatternsRankAndScaling) {
  const std::string c = "dense_clm_patterns";
  const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
  const LoraAdapter a = peft_adapter_read(kFixtures + c + "/adapter", cfg);
  // layers_to_transform [1, 2]; rank_pattern q_proj -> 2; alpha_pattern down_proj -> 5; rsLoRA, r 4, alpha 16.
  for (const LoraModule& m : a.modules) EXPECT_TRUE(m.layer == 1 || m.layer == 2) << m.path;
  const LoraModule* q = a.find("layers.1.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->r, 2);
  EXPECT_EQ(q->A.shape, (Shape{2, 64}));
  EXPECT_FLOAT_EQ(q->scaling, static_cast<float>(16 / std::sqrt(2.0)));
  const LoraModule* d = a.find("layers.2.mlp.down_proj");
  ASSERT_NE(d, nullptr);
  EXPECT_FLOAT_EQ(d->scaling, 5.f / 2.f);
  const LoraModule* k = a.find("layers.1.self_attn.k_proj");
  ASSERT_NE(k, nullptr);
  EXPECT_FLOAT_EQ(k->scaling, 8.f);
  EXPECT_EQ(a.find("layers.0.linear_attn.in_proj_qkv"), nullptr);
}

// The module paths a fixture's PEFT adapter adapts, read against its own config.json.
std::set<std::string> fixture_adapter_paths(const std::string& c) {
  const LoraAdapter a =
      peft_adapter_read(kFixtures + c + "/adapter", model_config_load(kFixtures + c + "/config.json"));
  std::set<std::string> paths;
  for (const LoraModule& m : a.modules) paths.insert(m.path);
  return paths;
}

// PEFT: layers_to_transform / exclude_modules filter target_modules, never target_parameters.
TEST(PeftIo, LayerFiltersLeaveExpertParametersAlone) {
  EXPECT_EQ(fixture_adapter_paths("moe_layers_params"), (std::set<std::string>{"layers.0.linear_attn.in_proj_z", "layers.1.self_attn.q_proj",
                                          "layers.0.mlp.experts.down_proj", "layers.1.mlp.experts.down_proj",
                                          "layers.2.mlp.experts.down_proj", "layers.3.mlp.experts.down_proj"}));
}

// PEFT accepts list entries that match nothing while another target matches.
TEST(PeftIo, UnmatchedListTargetsAreIgnoredAsPeftDoes) {
  EXPECT_EQ(fixture_adapter_paths("dense_unmatched"), (std::set<std::string>{"layers.0.linear_attn.in_proj_b", "layers.1.self_attn.v_proj",
                                          "layers.2.linear_attn.in_proj_b", "layers.3.self_attn.v_proj"}));
}

// A regex string target_modules that matches nothing next to target_parameters that do (PEFT warns only);
// PEFT's LoRA on the zero-sized shared expert of a model without one (shared_expert_intermediate_size 0).
TEST(PeftIo, RegexMatchingNothingAndZeroSizedSharedExpert) {
  EXPECT_EQ(fixture_adapter_paths("moe_regex_params"),
            (std::set<std::string>{"layers.0.mlp.experts.gate_up_proj", "layers.1.mlp.experts.gate_up_proj",
                                   "layers.2.mlp.experts.gate_up_proj", "layers.3.mlp.experts.gate_up_proj"}));
  EXPECT_EQ(fixture_adapter_paths("moe_zero_shared"),
            (std::set<std::string>{"layers.1.self_attn.q_proj", "layers.3.self_attn.q_proj"}));
  // A shared-expert tensor with no zero dimension on such a model is an error, not skipped.
  const std::string c = "moe_zero_shared";
  const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
  TempDir tmp("zs");
  copy_fixture(c, tmp.path);
  const fs::path w = tmp.path / "adapter_model.safetensors";
  std::vector<std::pair<std::string, Tensor>> ts;
  {
    SafetensorsFile f(w.string());
    for (const TensorEntry& e : f.entries()) {
      Tensor t = f.get(e.name);
      if (e.name.find("layers.0.mlp.shared_expert.up_proj.lora_B") != std::string::npos) t = host_tensor({3, 2});
      ts.emplace_back(e.name, t);
    }
  }
  safetensors_write(w.string(), ts);
  const std::string m = what([&] { peft_adapter_read(tmp.path.string(), cfg); });
  EXPECT_NE(m.find("layers.0.mlp.shared_expert.up_proj, a shared expert"), std::string::npos) << m;
  EXPECT_NE(m.find("adapter_model.safetensors"), std::string::npos) << m;
}

// The adapter remembers its class (key prefix); export --class auto and training from it keep it.
TEST(PeftIo, AdapterKeepsItsClass) {
  EXPECT_EQ(peft_adapter_read(kFixtures + "dense_cg/adapter",
                              model_config_load(kFixtures + "dense_cg/config.json")).class_prefix,
            "model.language_model.");
  EXPECT_EQ(peft_adapter_read(kFixtures + "dense_clm_patterns/adapter",
                              model_config_load(kFixtures + "dense_clm_patterns/config.json")).class_prefix,
            "model.");
  // The demo checkpoint is a *ForCausalLM one (model.*); an adapter written for ForConditionalGeneration
  // exports for that class unless --class says otherwise.
  const std::string demo = std::string(DT_SOURCE_DIR) + "/resources/demo/model";
  const ModelConfig cfg = model_config_load(demo + "/config.json");
  LoraSpec s;
  s.r = 2;
  s.modules = {"q_proj", "down_proj"};
  const LoraAdapter a = lora_create(cfg, s, 3);
  EXPECT_EQ(a.class_prefix, "");
  TempDir tmp("cls");
  peft_adapter_write(a, cfg, "model.language_model.", "", (tmp.path / "in").string());
  auto first_key = [](const fs::path& dir) { return tensors_of(dir / "adapter_model.safetensors").begin()->first; };
  ExportOptions o;
  o.model_dir = demo;
  o.adapter_dir = (tmp.path / "in").string();
  o.out_dir = (tmp.path / "auto").string();
  export_adapter(o);
  EXPECT_EQ(first_key(tmp.path / "auto").rfind("base_model.model.model.language_model.layers.", 0), 0u)
      << first_key(tmp.path / "auto");
  o.out_dir = (tmp.path / "clm").string();
  o.model_class = "causal_lm";
  export_adapter(o);
  EXPECT_EQ(first_key(tmp.path / "clm").rfind("base_model.model.model.layers.", 0), 0u) << first_key(tmp.path / "clm");
}

TEST(PeftIo, ExpertKeysNestAsPeftDoes) {
  const ModelConfig cfg = model_config_load(kFixtures + "moe_down/config.json");
  LoraSpec s;
  s.r = 2;
  s.parameters = {"experts.gate_up_proj"};
  s.modules = {"layers.1.self_attn.q_proj"};  // one layer only -> regex target_modules
  LoraAdapter a = lora_create(cfg, s, 1);
  TempDir tmp("nest");
  peft_adapter_write(a, cfg, "model.language_model.", "", tmp.path.string());
  const auto t = tensors_of(tmp.path / "adapter_model.safetensors");
  EXPECT_TRUE(t.count("base_model.model.model.language_model.layers.0.mlp.experts.lora_A.weight"));
  EXPECT_FALSE(t.count("base_model.model.model.language_model.layers.0.mlp.experts.base_layer.lora_A.weight"));
  const json c = read_json(tmp.path / "adapter_config.json");
  ASSERT_TRUE(c["target_modules"].is_string());
  EXPECT_EQ(c["target_modules"], "model\\.language_model\\.(?:layers\\.1\\.self_attn\\.q_proj)");
  EXPECT_EQ(c["base_model_name_or_path"], nullptr);
  EXPECT_EQ(c["lora_dropout"], 0.0);
  const LoraAdapter b = peft_adapter_read(tmp.path.string(), cfg);
  EXPECT_EQ(b.modules.size(), 5u);
  EXPECT_NE(b.find("layers.1.self_attn.q_proj"), nullptr);
  EXPECT_EQ(b.find("layers.3.self_attn.q_proj"), nullptr);
}

TEST(PeftIo, BadAdaptersGiveErrorsNamingFileAndKey) {
  const std::string c = "dense_cg";
  const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
  TempDir tmp("bad");
  const fs::path d = tmp.path / "a";
  auto reset = [&] {
    fs::remove_all(d);
    copy_fixture(c, d);
  };
  auto rewrite_config = [&](const std::function<void(json&)>& f) {
    json j = read_json(d / "adapter_config.json");
    f(j);
    std::ofstream(d / "adapter_config.json") << j.dump(2);
  };
  auto rewrite_tensors = [&](const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& f) {
    std::vector<std::pair<std::string, Tensor>> ts;
    {
      SafetensorsFile sf((d / "adapter_model.safetensors").string());
      for (const TensorEntry& e : sf.entries()) ts.emplace_back(e.name, host_convert(sf.get(e.name), e.dtype));
    }
    f(ts);
    safetensors_write((d / "adapter_model.safetensors").string(), ts);
  };
  const std::string q = "base_model.model.model.language_model.layers.1.self_attn.q_proj.lora_A.weight";

  reset();
  EXPECT_NO_THROW(peft_adapter_read(d.string(), cfg));

  // Rank mismatch: config says 8, tensors have 4.
  reset();
  rewrite_config([](json& j) { j["r"] = 8; });
  std::string m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("rank 4"), std::string::npos) << m;
  EXPECT_NE(m.find("r = 8"), std::string::npos) << m;
  EXPECT_NE(m.find("adapter_model.safetensors"), std::string::npos) << m;

  // Shape mismatch (in_features).
  reset();
  rewrite_tensors([&](auto& ts) {
    for (auto& [k, t] : ts)
      if (k == q) t = host_tensor({4, 32});
  });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find(q), std::string::npos) << m;
  EXPECT_NE(m.find("expected [4, 64]"), std::string::npos) << m;

  // Unknown module in the file.
  reset();
  rewrite_tensors([&](auto& ts) {
    ts.emplace_back("base_model.model.model.language_model.layers.1.self_attn.qkv_proj.lora_A.weight",
                    host_tensor({4, 64}));
  });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("qkv_proj"), std::string::npos) << m;

  // Missing tensors for a targeted module.
  reset();
  rewrite_tensors([&](auto& ts) {
    std::erase_if(ts, [&](const auto& p) { return p.first == q; });
  });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("missing"), std::string::npos) << m;
  EXPECT_NE(m.find(q), std::string::npos) << m;

  // Target modules the model does not have (e.g. the vision tower's).
  reset();
  rewrite_config([](json& j) { j["target_modules"].push_back("linear_fc1"); });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("linear_fc1"), std::string::npos) << m;
  EXPECT_NE(m.find("adapter_config.json"), std::string::npos) << m;

  // Only targets that name nothing adaptable of this model (here expert parameters of a dense model; PEFT
  // accepts such list entries, but not a config that adapts nothing).
  reset();
  rewrite_config([](json& j) {
    j["target_modules"] = json::array({"shared_expert.up_proj"});
    j["target_parameters"] = json::array({"mlp.experts.down_proj"});
  });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("select no adaptable module"), std::string::npos) << m;
  EXPECT_NE(m.find("adapter_config.json"), std::string::npos) << m;

  // Tensors of a module we cannot adapt (PEFT's "all-linear" on an MoE model takes mlp.shared_expert_gate).
  reset();
  rewrite_config([](json& j) { j["target_modules"].push_back("shared_expert_gate"); });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("shared_expert_gate"), std::string::npos) << m;
  reset();
  rewrite_tensors([&](auto& ts) {
    ts.emplace_back("base_model.model.model.language_model.layers.0.mlp.shared_expert_gate.lora_A.weight",
                    ts.front().second);
  });
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("layers.0.mlp.shared_expert_gate, which is not an adaptable module"), std::string::npos) << m;

  // Missing weights file, corrupt config, missing config.
  reset();
  fs::remove(d / "adapter_model.safetensors");
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("adapter_model.safetensors"), std::string::npos) << m;
  reset();
  std::ofstream(d / "adapter_config.json") << "{\"peft_type\": \"LORA\", \"r\": ";
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("adapter_config.json: not valid JSON"), std::string::npos) << m;
  fs::remove(d / "adapter_config.json");
  m = what([&] { peft_adapter_read(d.string(), cfg); });
  EXPECT_NE(m.find("adapter_config.json: cannot open"), std::string::npos) << m;
  m = what([&] { peft_adapter_read((tmp.path / "nowhere").string(), cfg); });
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;

  // Non-integer rank, DoRA.
  reset();
  rewrite_config([](json& j) { j["r"] = 4.0; });
  EXPECT_NE(what([&] { peft_adapter_read(d.string(), cfg); }).find("r must be a positive integer"), std::string::npos);
  reset();
  rewrite_config([](json& j) { j["use_dora"] = true; });
  EXPECT_NE(what([&] { peft_adapter_read(d.string(), cfg); }).find("use_dora"), std::string::npos);
}

TEST(PeftIo, AcceptsVariantsPeftAccepts) {
  // task_type null, init_lora_weights "gaussian", keys in the other class's prefix, BF16 tensors.
  const std::string c = "dense_cg";
  const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
  TempDir tmp("var");
  copy_fixture(c, tmp.path);
  json j = read_json(tmp.path / "adapter_config.json");
  j["task_type"] = nullptr;
  j["init_lora_weights"] = "gaussian";
  std::ofstream(tmp.path / "adapter_config.json") << j.dump();
  std::vector<std::pair<std::string, Tensor>> ts;
  {
    SafetensorsFile sf((tmp.path / "adapter_model.safetensors").string());
    for (const TensorEntry& e : sf.entries()) {
      std::string k = e.name;
      k.replace(k.find("model.language_model."), 21, "model.");
      ts.emplace_back(k, host_convert(sf.get(e.name), DType::BF16));
    }
  }
  std::reverse(ts.begin(), ts.end());
  safetensors_write((tmp.path / "adapter_model.safetensors").string(), ts);
  const LoraAdapter a = peft_adapter_read(tmp.path.string(), cfg);
  EXPECT_EQ(a.modules.size() * 2, ts.size());
  EXPECT_EQ(a.modules[0].A.dtype, DType::F32);
}

}  // namespace
}  // namespace deltatune

namespace deltatune {
namespace {

// Writes our merged checkpoints for tests/goldens/peft/check_all.sh (skipped unless DT_PEFT_MODELS and
// DT_PEFT_OUT are set: the tiny base models are made by make_models.py, not committed).
TEST(PeftExport, MergedCheckpointsForPythonCheck) {
  const char* models = std::getenv("DT_PEFT_MODELS");
  const char* out = std::getenv("DT_PEFT_OUT");
  if (!models || !*models || !out || !*out) GTEST_SKIP() << "DT_PEFT_MODELS / DT_PEFT_OUT not set";
  for (const std::string& c : kCases) {
    SCOPED_TRACE(c);
    const std::string model = read_json(kFixtures + c + "/fixture.json")["model"];
    const ModelWeights w = model_weights_load(std::string(models) + "/" + model);
    const LoraAdapter a = peft_adapter_read(kFixtures + c + "/adapter", w.config);
    const fs::path dst = fs::path(out) / c / "merged";
    fs::remove_all(dst);
    merged_checkpoint_write(w, a, dst.string());
    EXPECT_TRUE(fs::exists(dst / "config.json"));
  }
}

}  // namespace
}  // namespace deltatune

namespace deltatune {
namespace {

// PEFT 0.17-0.19.0 stored 3-D expert LoRA transposed (peft-adapter.md §6.3); such adapters are converted on read.
TEST(PeftIo, ConvertsPre0191ExpertOrientation) {
  const std::string c = "moe_all";
  const ModelConfig cfg = model_config_load(kFixtures + c + "/config.json");
  const LoraAdapter want = peft_adapter_read(kFixtures + c + "/adapter", cfg);
  TempDir tmp("old");
  LoraAdapter old = want;
  for (LoraModule& m : old.modules) {
    if (m.experts == 0) continue;
    const int64_t E = m.experts, r = m.r;
    Tensor a_old = host_tensor({r * E, m.out}), b_old = host_tensor({m.in, r * E});
    for (int64_t e = 0; e < E; ++e)
      for (int64_t k = 0; k < r; ++k) {
        for (int64_t o = 0; o < m.out; ++o)
          a_old.ptr<float>()[(e * r + k) * m.out + o] = m.B.ptr<float>()[o * r * E + k * E + e];
        for (int64_t i = 0; i < m.in; ++i)
          b_old.ptr<float>()[i * r * E + k * E + e] = m.A.ptr<float>()[(e * r + k) * m.in + i];
      }
    // Swap the declared sizes so that the writer accepts the old-layout tensors.
    std::swap(m.in, m.out);
    m.A = a_old;
    m.B = b_old;
  }
  // Write through safetensors directly (peft_adapter_write checks shapes against the model).
  std::vector<std::pair<std::string, Tensor>> ts;
  SafetensorsFile ref(kFixtures + c + "/adapter/adapter_model.safetensors");
  for (const TensorEntry& e : ref.entries()) {
    Tensor t = host_convert(ref.get(e.name), DType::F32);
    for (const LoraModule& m : old.modules) {
      if (m.experts == 0 || m.layer != std::stoi(e.name.substr(e.name.find("layers.") + 7))) continue;
      const bool inner = e.name.find("experts.base_layer.") != std::string::npos;
      const bool gate_up = m.path.find("gate_up_proj") != std::string::npos;
      if (e.name.find(".experts.") == std::string::npos || inner != gate_up) continue;
      t = e.name.find("lora_A") != std::string::npos ? m.A : m.B;
    }
    ts.emplace_back(e.name, t);
  }
  fs::copy(kFixtures + c + "/adapter/adapter_config.json", tmp.path / "adapter_config.json");
  json j = read_json(tmp.path / "adapter_config.json");
  j["peft_version"] = "0.18.0";
  std::ofstream(tmp.path / "adapter_config.json") << j.dump();
  safetensors_write((tmp.path / "adapter_model.safetensors").string(), ts);
  const LoraAdapter got = peft_adapter_read(tmp.path.string(), cfg);
  for (const LoraModule& m : want.modules) {
    const LoraModule* g = got.find(m.path);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(host_to_f32(g->A), host_to_f32(m.A)) << m.path;
    EXPECT_EQ(host_to_f32(g->B), host_to_f32(m.B)) << m.path;
  }
}

}  // namespace
}  // namespace deltatune
