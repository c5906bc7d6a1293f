#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "deltatune/model_info.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "io/model_config.h"
#include "model/weights.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden(const std::string& name) {
  return std::string(DT_SOURCE_DIR) + "/tests/goldens/models/" + name;
}

const std::vector<std::string> kModels = {"dense_vl", "moe_tied", "dense_bf16", "moe_per_expert", "moe_vl_quirks"};

TEST(IoModelInfo, ParamCountsMatchHfAndTensors) {
  for (const auto& name : kModels) {
    SCOPED_TRACE(name);
    const ModelInfo info = model_info_load(golden(name));
    const json g = json::parse(read_text_file(golden(name) + "/golden_eval.json"));
    // HF's sum(p.numel()) over the text model (tied weights once) is exactly our count.
    EXPECT_EQ(info.total_params, g["hf_text_params"].get<int64_t>());
    EXPECT_EQ(info.tied_embeddings, g["tied"].get<bool>());
    // And it is the sum of the stored text tensors' sizes, split over groups without remainder.
    CheckpointReader r(golden(name));
    int64_t numel = 0, tensors = 0;
    for (const auto& k : r.names()) {
      if (model_key_skipped(k)) continue;
      int64_t n = 1;
      for (int64_t d : r.entry(k).shape) n *= d;
      numel += n;
      ++tensors;
    }
    EXPECT_EQ(info.total_params, numel);
    int64_t by_group = 0, by_dtype = 0;
    for (const auto& kv : info.params_per_group) by_group += kv.second;
    for (const auto& kv : info.dtype_counts) by_dtype += kv.second;
    EXPECT_EQ(by_group, numel);
    EXPECT_EQ(by_dtype, tensors);
    EXPECT_EQ(info.params_per_group.count("other"), 0u);
    EXPECT_EQ(info.dtype_counts.begin()->first, g["checkpoint_dtype"].get<std::string>());
    EXPECT_EQ(info.params_per_group.at("embed"), info.vocab_size * info.hidden_size);
    EXPECT_EQ(info.params_per_group.count("lm_head"), info.tied_embeddings ? 0u : 1u);
    EXPECT_FALSE(info.has_tokenizer);
    for (const auto& w : info.warnings) {
      EXPECT_EQ(w.find("missing"), std::string::npos) << w;
      EXPECT_EQ(w.find("unknown"), std::string::npos) << w;
      EXPECT_EQ(w.find("tie_word_embeddings"), std::string::npos) << w;
    }
  }
}

TEST(IoModelInfo, DenseVlDetails) {
  const ModelInfo info = model_info_load(golden("dense_vl"));
  EXPECT_EQ(info.model_type, "qwen3_5");
  EXPECT_EQ(info.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_TRUE(info.vision_language_layout);
  EXPECT_FALSE(info.is_moe);
  EXPECT_TRUE(info.has_chat_template);  // tokenizer_config.json carries one
  EXPECT_EQ(info.layer_types,
            (std::vector<std::string>{"linear_attention", "full_attention", "linear_attention",
                                      "linear_attention", "full_attention"}));
  CheckpointReader r(golden("dense_vl"));
  int64_t skipped = 0;
  for (const auto& k : r.names()) skipped += model_key_skipped(k);
  EXPECT_EQ(info.skipped_tensors, skipped);
  EXPECT_EQ(info.lora_groups, (std::vector<std::string>{"attn", "linear_attn", "mlp", "vision"}));
  // 2 full layers, by hand: q 64->256 (query + gate), k/v 64->64, o 128->64.
  const auto lora = lora_params_per_group(info, 16);
  EXPECT_EQ(lora.at("attn"), 2 * 16 * ((64 + 256) + 2 * (64 + 64) + (128 + 64)));
  // 3 GDN layers: qkv 64->160, z 64->96, a/b 64->4, out 96->64.
  EXPECT_EQ(lora.at("linear_attn"), 3 * 16 * ((64 + 160) + (64 + 96) + 2 * (64 + 4) + (96 + 64)));
  EXPECT_EQ(lora.at("mlp"), 5 * 16 * (3 * (64 + 96)));
  // 1 vision block (hidden 16, MLP 32): qkv 16->48, proj 16->16, fc1 16->32, fc2 32->16.
  EXPECT_EQ(lora.at("vision"), 1 * 16 * ((16 + 48) + (16 + 16) + (16 + 32) + (32 + 16)));
  EXPECT_EQ(lora_default_groups(info), (std::vector<std::string>{"attn", "linear_attn", "mlp"}));
}

TEST(IoModelInfo, MoeGroupsAndLoraMatchInventory) {
  for (const auto& name : {"moe_tied", "moe_per_expert", "dense_bf16"}) {
    SCOPED_TRACE(name);
    const ModelInfo info = model_info_load(golden(name));
    const ModelConfig cfg = model_config_load(golden(name) + "/config.json");
    EXPECT_EQ(info.lora_groups, lora_groups_of(cfg));
    // Our closed-form count equals the adapter modules the LoRA code would create (r*(in+out), x E for
    // experts).
    for (int r : {1, 8}) {
      std::map<std::string, int64_t> want;
      for (const LoraModule& m : lora_inventory(cfg))
        want[m.group] += int64_t{r} * (m.in + m.out) * (m.experts > 0 ? m.experts : 1);
      EXPECT_EQ(lora_params_per_group(info, r), want) << "r=" << r;
    }
  }
  const ModelInfo moe = model_info_load(golden("moe_tied"));
  EXPECT_TRUE(moe.is_moe);
  EXPECT_EQ(moe.params_per_group.at("experts"), 4 * 4 * (2 * 32 * 64 + 64 * 32));
  EXPECT_EQ(moe.params_per_group.at("router"), 4 * 4 * 64);
  EXPECT_EQ(moe.params_per_group.at("shared_expert"), 4 * (3 * 48 * 64 + 64));
  // Experts: A (r*E, in) + B (out, r*E) per parameter.
  EXPECT_EQ(lora_params_per_group(moe, 2).at("experts"), 4 * 2 * 4 * ((64 + 64) + (32 + 64)));
}

TEST(IoModelInfo, TokenizerAndTemplateDetection) {
  const fs::path dir = fs::temp_directory_path() / ("dt_io_info_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(golden("moe_tied") + "/" + f, dir / f);
  ModelInfo info = model_info_load(dir.string());
  EXPECT_FALSE(info.has_tokenizer);
  EXPECT_FALSE(info.has_chat_template);
  EXPECT_EQ(info.warnings.size(), 2u);
  std::ofstream(dir / "tokenizer.json") << "{}";
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "x"})";
  info = model_info_load(dir.string());
  EXPECT_TRUE(info.has_tokenizer);
  EXPECT_FALSE(info.has_chat_template);
  std::ofstream(dir / "chat_template.jinja") << "{{ messages }}";
  info = model_info_load(dir.string());
  EXPECT_TRUE(info.has_chat_template);
  EXPECT_TRUE(info.warnings.empty());
  fs::remove_all(dir);
}

TEST(IoModelInfo, BrokenCheckpointGivesWarningsNotErrors) {
  const fs::path dir = fs::temp_directory_path() / ("dt_io_info_b_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(golden("moe_tied") + "/config.json", dir / "config.json");
  CheckpointReader r(golden("moe_tied"));
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : r.names())
    if (n != "model.norm.weight") ts.emplace_back(n, r.get(n));
  ts.emplace_back("model.extra.weight", host_tensor({3}));
  safetensors_write((dir / "model.safetensors").string(), ts);
  const ModelInfo info = model_info_load(dir.string());
  EXPECT_EQ(info.params_per_group.at("other"), 3);
  bool saw_missing = false, saw_unknown = false;
  for (const auto& w : info.warnings) {
    saw_missing |=
        w.find("missing tensors") != std::string::npos && w.find("model.norm.weight") != std::string::npos;
    saw_unknown |= w.find("unknown text tensors") != std::string::npos &&
                   w.find("model.extra.weight") != std::string::npos;
  }
  EXPECT_TRUE(saw_missing);
  EXPECT_TRUE(saw_unknown);
  fs::remove_all(dir);
  EXPECT_THROW(model_info_load(dir.string()), Error);
}

// The eval goldens other suites consume: counts and loss agree with the JSONL (targets shifted by one).
TEST(IoGoldens, EvalFilesConsistent) {
  for (const auto& name : kModels) {
    SCOPED_TRACE(name);
    const json g = json::parse(read_text_file(golden(name) + "/golden_eval.json"));
    std::ifstream in(golden(name) + "/golden_eval.jsonl");
    std::string line;
    size_t i = 0;
    double sum = 0;
    int64_t count = 0;
    while (std::getline(in, line)) {
      const json row = json::parse(line);
      const auto labels = row["labels"].get<std::vector<int64_t>>();
      ASSERT_EQ(labels.size(), row["input_ids"].size());
      int64_t c = 0;
      for (size_t t = 1; t < labels.size(); ++t) c += labels[t] != -100;
      ASSERT_LT(i, g["per_sequence"].size());
      EXPECT_EQ(g["per_sequence"][i]["count"].get<int64_t>(), c);
      EXPECT_EQ(g["per_sequence"][i]["length"].get<size_t>(), labels.size());
      sum += g["per_sequence"][i]["loss_sum"].get<double>();
      count += c;
      if (i == 0) {
        EXPECT_EQ(g["logits_first"].size(), labels.size());
        EXPECT_EQ(g["logits_first"][0].size(), 512u);
      }
      ++i;
    }
    EXPECT_EQ(i, 3u);
    EXPECT_EQ(g["count"].get<int64_t>(), count);
    EXPECT_NEAR(g["loss"].get<double>(), sum / static_cast<double>(count), 1e-9);
  }
}

TEST(IoModelInfo, VramEstimateParts) {
  const ModelInfo info = model_info_load(golden("dense_vl"));
  const int64_t T = 2048;
  const VramEstimate plain = estimate_vram(info, 16, T, false, false);
  ASSERT_FALSE(info.tied_embeddings);  // dense_vl: its untied embedding table stays in host memory
  EXPECT_EQ(plain.weights, 2 * (info.total_params - info.params_per_group.at("embed")));
  int64_t lora = 0;  // the default groups: all but `vision` here
  for (const auto& kv : lora_params_per_group(info, 16))
    if (kv.first != "vision") lora += kv.second;
  EXPECT_EQ(plain.lora_and_optimizer, 16 * lora);
  // Without checkpointing the peak is at the loss: every layer's activations and the loss buffers.
  EXPECT_EQ(plain.logits, 8 * T * info.vocab_size);  // fp32 logits + gradient
  EXPECT_EQ(plain.backend_buffers, int64_t{56} << 20);  // cuBLAS workspace, step buffers
  // The mixer inputs padded for the K-concatenated LoRA products: (i + 1)·r columns of member i, bf16.
  const int64_t nq = info.num_attention_heads * info.head_dim, nkv = info.num_key_value_heads * info.head_dim;
  const int64_t vd = info.linear_num_value_heads * info.linear_value_head_dim, HV = info.linear_num_value_heads;
  const int64_t conv = 2 * info.linear_num_key_heads * info.linear_key_head_dim + vd;
  int64_t pad = 0;
  for (const auto& t : info.layer_types)
    pad += t == "full_attention" ? 2 * 16 * (2 * nq + 2 * nkv + 3 * nkv) : 2 * 16 * (conv + 2 * vd + 7 * HV);
  EXPECT_EQ(plain.lora_kcat_pad, pad + (int64_t{2} << 20));  // one batch (< 256 MiB), rounded to 2 MiB
  EXPECT_EQ(plain.total, plain.weights + plain.lora_and_optimizer + plain.activations + plain.logits +
                             plain.overhead + plain.backend_buffers + plain.lora_kcat_pad);
  const VramEstimate fused = estimate_vram(info, 16, T, true, false);
  // The fused loss: 1024 rows (the logits buffer's 2^26 floats hold more at this vocabulary) of fp32 logits and
  // their bf16 gradient.
  ASSERT_LE(1024 * info.vocab_size, int64_t{1} << 26);
  EXPECT_EQ(fused.logits, 1024 * info.vocab_size * (4 + 2));
  EXPECT_EQ(fused.activations, plain.activations);
  // A large vocabulary: the buffer's 2^26 floats bound the rows (256 at Qwen3.5's 248320, whatever the chunk).
  ModelInfo big_vocab = info;
  big_vocab.vocab_size = 248320;
  EXPECT_EQ(estimate_vram(big_vocab, 16, T, true, false).logits, 256 * 248320 * int64_t{6});
  const VramEstimate ckpt = estimate_vram(info, 16, T, true, true);
  EXPECT_LT(ckpt.total, fused.total);
  EXPECT_GE(ckpt.activations + ckpt.logits, 2 * T * info.num_layers * info.hidden_size);  // at least the inputs
  // Checkpointing only the first layer lands between; all layers (or more than exist) equals full checkpointing.
  const VramEstimate part = estimate_vram(info, 16, T, true, true, 1);
  EXPECT_GT(part.total, ckpt.total);
  EXPECT_LT(part.total, fused.total);
  EXPECT_EQ(estimate_vram(info, 16, T, true, true, info.num_layers).total, ckpt.total);
  EXPECT_EQ(estimate_vram(info, 16, T, true, true, 1000).total, ckpt.total);
  EXPECT_EQ(estimate_vram(info, 16, T, true, true, 0).total, fused.total);
  // Activations grow linearly with tokens but for the LoRA factors' bf16 copies (fixed) and rounding.
  const int64_t copies = 2 * lora;  // dense: every targeted group is copied
  EXPECT_NEAR(static_cast<double>(estimate_vram(info, 16, 2 * T, true, false).activations),
              2.0 * static_cast<double>(fused.activations) - copies * (1 + 1.0 / 256), 4.0);
  // MoE: the default groups exclude experts.
  const ModelInfo moe = model_info_load(golden("moe_tied"));
  const auto ml = lora_params_per_group(moe, 4);
  EXPECT_EQ(estimate_vram(moe, 4, 16, true, false).lora_and_optimizer,
            16 * (ml.at("attn") + ml.at("linear_attn") + ml.at("shared_expert")));
  // The run's groups: only those chosen; expert LoRA adds its pairs and per routed token and layer the fp32 rank-r
  // intermediates of gate_up and down (4r in 2-byte units); its B factors are used as held ([E, out, r] on the
  // backend: nothing regrouped per layer).
  const int64_t Tm = 64;
  const VramEstimate attn_only = estimate_vram(moe, 4, Tm, true, false, -1, "none", 1024, {}, {"attn"});
  EXPECT_EQ(attn_only.lora_and_optimizer, 16 * ml.at("attn"));
  const VramEstimate defaults = estimate_vram(moe, 4, Tm, true, false);
  const VramEstimate with_experts = estimate_vram(moe, 4, Tm, true, false, -1, "none", 1024, {},
                                                  {"attn", "linear_attn", "shared_expert", "experts"});
  EXPECT_EQ(with_experts.lora_and_optimizer - defaults.lora_and_optimizer, 16 * ml.at("experts"));
  const int64_t expert_acts = 2 * Tm * moe.num_layers * moe.num_experts_per_tok * 4 * 4;
  EXPECT_NEAR(static_cast<double>(with_experts.activations - defaults.activations),
              static_cast<double>(expert_acts + expert_acts / 256), 1.0);  // + the allocator's slack
  // Fewer groups: fewer LoRA factors copied to bf16 for the step (and fewer rank-r intermediates).
  EXPECT_LT(attn_only.activations, defaults.activations);
}

TEST(IoModelInfo, CliInfoPrintsSummaryAndJson) {
  const std::string cmd = std::string(DT_CLI_PATH) + " info --model " + golden("moe_tied");
  auto run = [](const std::string& c, int* rc) {
    std::string out;
    FILE* p = ::popen((c + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    *rc = WEXITSTATUS(::pclose(p));
    return out;
  };
  int rc = -1;
  const std::string text = run(cmd, &rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("qwen3_5_moe"), std::string::npos) << text;
  EXPECT_NE(text.find("263,544"), std::string::npos) << text;
  const std::string js = run(cmd + " --json --lora-r 8", &rc);
  EXPECT_EQ(rc, 0) << js;
  ASSERT_EQ(std::count(js.begin(), js.end(), '\n'), 1) << "one JSON line: " << js;
  const json j = json::parse(js);
  EXPECT_EQ(j["total_params"].get<int64_t>(), 263544);
  EXPECT_EQ(j["lora_r"].get<int>(), 8);
  EXPECT_TRUE(j["tied_embeddings"].get<bool>());
  const std::string bad = run(std::string(DT_CLI_PATH) + " info --model /nonexistent", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(bad.find("/nonexistent"), std::string::npos) << bad;
  run(std::string(DT_CLI_PATH) + " info --model x --bogus", &rc);
  EXPECT_EQ(rc, 1);
}

}  // namespace
}  // namespace deltatune
