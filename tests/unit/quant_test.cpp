// Quantized frozen base on the CPU reference: the e4m3 and NF4 formats, block quantization, the run key
// base_quantization / load_in_4bit, config.json's quantization_config, and a model whose dense linear matrices
// are held quantized giving the same logits as the same model with those matrices dequantized up front.
// Format facts used as expectations come from the format definitions (float8_e4m3fn: bias 7, max 448, no
// infinities; torch.finfo(torch.float8_e4m3fn).max == 448), not from this code.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "error_text.h"
#include "backend/backend.h"
#include "backend/quant_ops.h"
#include "core/error.h"
#include "data/batch.h"
#include "deltatune/run_config.h"
#include "io/model_config.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "quant/codebooks.h"
#include "quant/fp8_gemm_host.h"
#include "quant/quantize_host.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

TEST(QuantFp8, E4m3DecodesTheFormatsCornerValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.f);                 // largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.f, -6));   // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.f, -9));   // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.f);                   // exponent 7 = bias
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(QuantFp8, EncodeRoundTripsEveryCodeAndRoundsToNearestEven) {
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7f) == 0x7f) continue;  // NaN
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    if (v == 0x80) continue;           // -0 encodes as -0 (0x80), compare below
    EXPECT_EQ(f32_to_fp8_e4m3(f), v) << "code " << v << " value " << f;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(-0.f), 0x80);
  // 1 + 1/16 lies halfway between 1 (mantissa 0, even) and 1.125 (mantissa 1): to the even one.
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  // 1.125 + 1/16 lies halfway between mantissa 1 and 2: to 2 (even).
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(f32_to_fp8_e4m3(1000.f), 0x7e);  // saturates at 448
  EXPECT_EQ(f32_to_fp8_e4m3(-1000.f), 0xfe);
}

Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 0.05f) {
  Tensor t = host_tensor({rows, cols}, DType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = nd(rng);
  return t;
}

TEST(QuantFp8, BlockQuantizationKeepsEachBlocksAmaxAndBoundsTheError) {
  // 200 x 300: partial blocks in both directions.
  Tensor w = random_matrix(200, 300, 1);
  w.ptr<float>()[5 * 300 + 7] = 3.f;  // one outlier: only its block's scale changes
  const QuantizedWeight q = quantize_host(w, QuantFormat::FP8);
  ASSERT_EQ(q.scales.shape, (Shape{2, 3}));
  const Tensor d = dequantize_host(q);
  for (int64_t r = 0; r < 200; ++r)
    for (int64_t c = 0; c < 300; ++c) {
      const float x = w.ptr<float>()[r * 300 + c], y = d.ptr<float>()[r * 300 + c];
      const float s = q.scales.ptr<float>()[(r / 128) * 3 + c / 128];
      // e4m3 has 3 mantissa bits: relative error <= 2^-4 for normals, absolute <= 2^-10 * scale below.
      EXPECT_LE(std::fabs(x - y), std::max(std::fabs(x) / 16.f, std::ldexp(s, -10)) * 1.0001f) << r << "," << c;
    }
  EXPECT_NEAR(d.ptr<float>()[5 * 300 + 7], 3.f, 1e-6f);  // the block's amax maps to 448 exactly
  EXPECT_NEAR(q.scales.ptr<float>()[0], 3.f / 448.f, 1e-9f);
}

// The FP8 product's reference (what the CUDA FP8 GEMM is tested against), x·Wᵀ and x·W: within the e4m3
// activation rounding (3 mantissa bits, under 2^-4 relative a value) of the fp32 product of x and the
// dequantized weight, and not equal to it (the activations were rounded).
TEST(QuantFp8, ActivationQuantizedProductReference) {
  const QuantizedWeight w = quantize_host(random_matrix(128, 256, 4), QuantFormat::FP8);
  const std::vector<float> wd = host_to_f32(dequantize_host(w));
  for (bool trans_w : {true, false}) {
    const int64_t k = trans_w ? 256 : 128, m = trans_w ? 128 : 256;
    const Tensor x = random_matrix(5, k, 5);
    const std::vector<float> xf = host_to_f32(x);
    const Tensor y = fp8_gemm_host(x, w, trans_w);
    ASSERT_EQ(y.shape, (Shape{5, m}));
    double e2 = 0, r2 = 0;
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t j = 0; j < m; ++j) {
        double ref = 0;
        for (int64_t i = 0; i < k; ++i)
          ref += double(xf[r * k + i]) * (trans_w ? wd[j * k + i] : wd[i * m + j]);
        e2 += std::pow(y.ptr<float>()[r * m + j] - ref, 2);
        r2 += ref * ref;
      }
    const double rel = std::sqrt(e2 / r2);
    EXPECT_GT(rel, 0.0) << trans_w;
    EXPECT_LT(rel, 0.0625) << trans_w;
  }
  EXPECT_THROW(fp8_gemm_host(random_matrix(2, 100, 6), w, true), Error);
}

TEST(QuantNf4, CodebookAndDynamicMapAreTheBitsandbytesTables) {
  const auto& nf4 = nf4_codebook();
  EXPECT_EQ(nf4.front(), -1.f);
  EXPECT_EQ(nf4[7], 0.f);
  EXPECT_EQ(nf4.back(), 1.f);
  for (size_t i = 1; i < nf4.size(); ++i) EXPECT_LT(nf4[i - 1], nf4[i]);
  const auto& dm = dynamic_map_signed();
  for (size_t i = 1; i < dm.size(); ++i) EXPECT_LE(dm[i - 1], dm[i]);
  EXPECT_EQ(dm.back(), 1.f);
  EXPECT_EQ(std::count(dm.begin(), dm.end(), 0.f), 1);
  // The smallest magnitude is 10^-6 times the first linspace(0.1, 1, 2) midpoint, 0.55.
  float smallest = 1.f;
  for (float v : dm)
    if (v != 0.f) smallest = std::min(smallest, std::fabs(v));
  EXPECT_NEAR(smallest, 0.55e-6f, 1e-12f);
}

TEST(QuantNf4, PacksHighNibbleFirstAndDoubleQuantizesTheAbsmax) {
  Tensor w = random_matrix(64, 96, 2);
  const QuantizedWeight q = quantize_host(w, QuantFormat::NF4);
  const int64_t n = 64 * 96, nb = n / 64;
  ASSERT_EQ(q.values.numel(), n / 2);
  ASSERT_EQ(q.scales.numel(), nb);
  ASSERT_EQ(q.absmax2.numel(), (nb + 255) / 256);
  const auto& nf4 = nf4_codebook();
  const Tensor d = dequantize_host(q);
  for (int64_t b = 0; b < nb; ++b) {
    float amax = 0.f;
    for (int64_t i = b * 64; i < (b + 1) * 64; ++i) amax = std::max(amax, std::fabs(w.ptr<float>()[i]));
    const float absmax = dynamic_map_signed()[q.scales.ptr<uint8_t>()[b]] * q.absmax2.ptr<float>()[0] + q.offset;
    EXPECT_NEAR(absmax, amax, 0.02f * amax) << "block " << b;  // 8-bit dynamic code of (absmax - mean)
    for (int64_t i = b * 64; i < (b + 1) * 64; ++i) {
      const uint8_t byte = q.values.ptr<uint8_t>()[i / 2];
      const int idx = i % 2 == 0 ? byte >> 4 : byte & 0xf;
      EXPECT_EQ(idx, nearest_index(nf4.data(), 16, w.ptr<float>()[i] / amax)) << i;
      EXPECT_FLOAT_EQ(d.ptr<float>()[i], nf4[static_cast<size_t>(idx)] * absmax);
    }
  }
}

TEST(QuantRunConfig, BaseQuantizationAndAxolotlsLoadIn4bit) {
  EXPECT_EQ(run_config_from_yaml_string("").base_quantization, "none");
  EXPECT_EQ(run_config_from_yaml_string("base_quantization: fp8\n").base_quantization, "fp8");
  EXPECT_EQ(run_config_from_yaml_string("load_in_4bit: true\n").base_quantization, "nf4");
  EXPECT_EQ(run_config_from_yaml_string("load_in_4bit: false\n").base_quantization, "none");
  EXPECT_EQ(run_config_from_yaml_string("load_in_4bit: true\nbase_quantization: nf4\n").base_quantization, "nf4");
  EXPECT_NE(error_of([] { run_config_from_yaml_string("base_quantization: int8\n"); }).find("none, fp8, nf4"),
            std::string::npos);
  const std::string both = error_of([] { run_config_from_yaml_string("base_quantization: fp8\nload_in_4bit: true\n"); });
  EXPECT_NE(both.find("disagree"), std::string::npos) << both;
  const std::string eight = error_of([] { run_config_from_yaml_string("load_in_8bit: true\n"); });
  EXPECT_NE(eight.find("8-bit"), std::string::npos) << eight;
  // Round trip through the YAML the studio writes.
  RunConfig c;
  c.base_quantization = "nf4";
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(c)).base_quantization, "nf4");
}

nlohmann::json tiny_config() {
  return nlohmann::json::parse(R"({
    "model_type": "qwen3_5_text", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
    "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 24})");
}

TEST(QuantModelConfig, Fp8QuantizationConfigIsReadAndOtherMethodsAreRefusedByName) {
  nlohmann::json j = tiny_config();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}}};
  const ModelConfig c = model_config_parse_string(j.dump(), "m/config.json");
  EXPECT_EQ(c.quant_method, "fp8");
  EXPECT_EQ(c.quant_block_rows, 128);
  for (const char* method : {"gptq", "awq", "bitsandbytes", "compressed-tensors"}) {
    j["quantization_config"] = {{"quant_method", method}};
    const std::string e = error_of([&] { model_config_parse_string(j.dump(), "m/config.json"); });
    EXPECT_NE(e.find(std::string("\"") + method + "\""), std::string::npos) << e;
    EXPECT_NE(e.find("m/config.json"), std::string::npos) << e;
  }
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {1, 128}}};
  EXPECT_NE(error_of([&] { model_config_parse_string(j.dump(), "m/config.json"); }).find("weight_block_size"),
            std::string::npos);
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"activation_scheme", "static"}};
  EXPECT_NE(error_of([&] { model_config_parse_string(j.dump(), "m/config.json"); }).find("activation_scheme"),
            std::string::npos);
}

// The same checkpoint with its dense linear matrices replaced by their dequantized values (host F32 tensors).
ModelWeights dequantized_copy(const ModelWeights& w, QuantFormat f) {
  ModelWeights d = w;
  auto rq = [&](Tensor& t) {
    if (!t.defined()) return;
    // Stacked experts [E, out, in] are quantized as the matrix [E*out, in].
    const Tensor m = t.ndim() == 3 ? t.view({t.dim(0) * t.dim(1), t.dim(2)}) : t;
    t = dequantize_host(quantize_host(m, f)).view(t.shape);
  };
  for (LayerWeights& L : d.layers) {
    if (L.kind == LayerKind::FullAttention) {
      for (Tensor* t : {&L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj, &L.attn.o_proj}) rq(*t);
    } else {
      for (Tensor* t : {&L.lin.in_proj_qkv, &L.lin.in_proj_z, &L.lin.in_proj_b, &L.lin.in_proj_a, &L.lin.out_proj})
        rq(*t);
    }
    for (Tensor* t : {&L.mlp.gate_proj, &L.mlp.up_proj, &L.mlp.down_proj, &L.moe.gate_up, &L.moe.down,
                      &L.moe.shared.gate_proj, &L.moe.shared.up_proj, &L.moe.shared.down_proj})
      rq(*t);
  }
  return d;
}

// (format, golden model folder): dense_bf16, and moe_tied for the experts and the shared expert.
class QuantModel : public ::testing::TestWithParam<std::tuple<QuantFormat, std::string>> {};

TEST_P(QuantModel, QuantizedLinearsGiveTheLogitsOfTheirDequantizedValues) {
  const auto [format, model] = GetParam();
  const fs::path dir = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "models" / model;
  ModelWeights w = model_weights_load(dir.string());
  auto be = make_cpu_backend();
  Example ex;
  for (int i = 0; i < 24; ++i) ex.input_ids.push_back((i * 37 + 5) % static_cast<int>(w.config.vocab_size));
  ex.labels = ex.input_ids;
  const Batch batch = batch_from_examples({&ex});

  const Tensor plain = Qwen35Model(w, *be).logits(batch, nullptr);
  ModelWeights deq = dequantized_copy(w, format);
  const Tensor ref = Qwen35Model(deq, *be).logits(batch, nullptr);
  w.base_quant = format;
  const Tensor got = Qwen35Model(w, *be).logits(batch, nullptr);
  double err = 0, diff_plain = 0, norm = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    err = std::max(err, double(std::fabs(got.ptr<float>()[i] - ref.ptr<float>()[i])));
    diff_plain += std::pow(double(got.ptr<float>()[i] - plain.ptr<float>()[i]), 2);
    norm += std::pow(double(plain.ptr<float>()[i]), 2);
  }
  EXPECT_LT(err, 1e-5) << "quantized model vs dequantized weights";
  // Quantization changes the logits: nmse vs the unquantized model (measured on these tiny random models, whose
  // few layers amplify weight noise: dense_bf16 fp8 2.7e-2, nf4 0.25; moe_tied, where router top-k flips add to
  // it, fp8 0.15, nf4 0.54; the bounds catch a broken format, ~2-4x those; unrelated logits give ~2).
  std::printf("[quant] %s %s logits nmse vs the bf16 model: %.3e\n", quant_format_name(format), model.c_str(),
              diff_plain / norm);
  EXPECT_GT(diff_plain, 0.0);
  const bool moe = w.config.is_moe();
  EXPECT_LT(diff_plain / norm, format == QuantFormat::FP8 ? (moe ? 0.4 : 0.1) : (moe ? 1.0 : 0.5));
}

// An untied quantized model keeps its embedding table on the host (rows gathered per forward): the cached
// forward (generation: prefill, then one token) gives the logits of the full forward.
TEST(QuantModelHostEmbedding, CachedForwardMatchesTheFullForward) {
  const fs::path dir = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "models" / "dense_bf16";
  ModelWeights w = model_weights_load(dir.string());
  ASSERT_FALSE(w.tied);
  w.base_quant = QuantFormat::FP8;
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  ASSERT_TRUE(model.decode_step_recordable());
  Example ex;
  for (int i = 0; i < 9; ++i) ex.input_ids.push_back((i * 41 + 7) % static_cast<int>(w.config.vocab_size));
  ex.labels = ex.input_ids;
  const Tensor full = model.logits(batch_from_examples({&ex}), nullptr);
  const int64_t V = full.cols();

  InferenceCache cache = model.new_inference_cache(1, 16);
  auto layout = [&](std::vector<int32_t> positions) {
    SeqLayout seq;
    seq.host_cu_seqlens = {0, static_cast<int32_t>(positions.size())};
    seq.cu_seqlens = be->upload_i32(seq.host_cu_seqlens);
    seq.positions = be->upload_i32(positions);
    seq.max_seqlen = static_cast<int32_t>(positions.size());
    return seq;
  };
  const std::vector<int32_t> prompt(ex.input_ids.begin(), ex.input_ids.end() - 1);
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  Tensor pre = be->alloc({static_cast<int64_t>(prompt.size()), V}, DType::F32);
  model.lm_logits(model.forward_cached(be->upload_i32(prompt), layout(pos), cache, nullptr, true, nullptr), pre);
  Tensor next = be->alloc({1, V}, DType::F32);
  model.lm_logits(model.forward_cached(be->upload_i32({ex.input_ids.back()}),
                                       layout({static_cast<int32_t>(prompt.size())}), cache, nullptr, false, nullptr),
                  next);
  const Tensor pre_h = be->download(pre, DType::F32), next_h = be->download(next, DType::F32);
  double err = 0;
  for (int64_t i = 0; i < pre_h.numel(); ++i)
    err = std::max(err, double(std::fabs(pre_h.ptr<float>()[i] - full.ptr<float>()[i])));
  for (int64_t v = 0; v < V; ++v)
    err = std::max(err, double(std::fabs(next_h.ptr<float>()[v] - full.ptr<float>()[(full.rows() - 1) * V + v])));
  EXPECT_LT(err, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Cpu, QuantModel,
                         ::testing::Combine(::testing::Values(QuantFormat::FP8, QuantFormat::NF4),
                                            ::testing::Values(std::string("dense_bf16"), std::string("moe_tied"))),
                         [](const ::testing::TestParamInfo<std::tuple<QuantFormat, std::string>>& i) {
                           return std::string(quant_format_name(std::get<0>(i.param))) + "_" + std::get<1>(i.param);
                         });

}  // namespace
}  // namespace deltatune
