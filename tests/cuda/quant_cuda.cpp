// Quantized frozen base on the CUDA backend against the CPU reference (quant/quantize_host):
// - quantization on the device: FP8 bytes and NF4 indices equal the host's (ties may round apart when the two
//   sides' fp32 products differ in the last bit: at most 1e-3 of the values may differ, by one step);
// - dequantization of the same quantized matrix: the host's fp32 values rounded to bf16, exactly;
// - a model with quantized linears (dense_bf16; moe_tied: experts and shared expert too), forward logits vs
//   the CPU model with the same format (the CPU quantizes on the host): norm-relative error <= 5e-2 dense,
//   0.2 MoE, the bars of the bf16 model (model_e2e.cpp: router top-k flips in bf16, as HF's bf16 shows);
// - the FP8 golden checkpoint (tests/goldens/quant/fp8, transformers' FineGrainedFP8Config) on the GPU: loss
//   within 1e-2 relative and logits within 5e-2 norm-relative of HF (fp32, the same FP8 weights), the bf16 bars.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "../golden_files.h"
#include "backend/backend.h"
#include "backend/quant_ops.h"
#include "data/batch.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "quant/quantize_host.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = host_tensor({rows, cols}, DType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = nd(rng);
  return host_convert(t, DType::BF16);  // what a checkpoint holds
}

class QuantCuda : public ::testing::TestWithParam<QuantFormat> {};

TEST_P(QuantCuda, DeviceQuantizationAndDequantizationMatchTheHost) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend(0, DType::BF16);
  for (const Shape& s : {Shape{256, 384}, Shape{200, 300}, Shape{4096, 1024}}) {
    const Tensor w = random_matrix(s[0], s[1], 7);
    const QuantizedWeight host = quantize_host(w, GetParam());
    const auto dev = quant_ops(*gpu).upload_quantized(w, GetParam());
    const Tensor vh = host.values, vd = gpu->download(dev->values, DType::U8);
    int64_t differ = 0;
    for (int64_t i = 0; i < vh.numel(); ++i) differ += vh.ptr<uint8_t>()[i] != vd.ptr<uint8_t>()[i];
    EXPECT_LE(differ, vh.numel() / 1000) << shape_str(s) << ": packed values differ";
    // Dequantize the host's own quantized matrix on the device: its values rounded to bf16.
    const auto same = quant_ops(*gpu).upload_quantized(host);
    Tensor out = gpu->alloc(s, DType::BF16);
    quant_ops(*gpu).dequantize(*same, out);
    const std::vector<float> got = host_to_f32(gpu->download(out, DType::F32));
    const std::vector<float> ref = host_to_f32(host_convert(dequantize_host(host), DType::BF16));
    int64_t mismatches = 0;
    for (size_t i = 0; i < ref.size(); ++i) mismatches += got[i] != ref[i];
    EXPECT_EQ(mismatches, 0) << shape_str(s);
    // F32 output (the generic path).
    Tensor out32 = gpu->alloc(s, DType::F32);
    quant_ops(*gpu).dequantize(*same, out32);
    const std::vector<float> got32 = host_to_f32(gpu->download(out32, DType::F32));
    const std::vector<float> ref32 = host_to_f32(dequantize_host(host));
    double max_rel = 0;
    for (size_t i = 0; i < ref32.size(); ++i)
      max_rel = std::max(max_rel, std::fabs(double(got32[i]) - ref32[i]) / (std::fabs(ref32[i]) + 1e-12));
    EXPECT_LT(max_rel, 1e-6) << shape_str(s);
  }
}

TEST_P(QuantCuda, ModelLogitsMatchTheCpuWithTheSameFormat) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"dense_bf16", "moe_tied"}) {
    fs::path dir = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "models" / model;
    if (!fs::exists(dir)) dir = fs::path("tests") / "goldens" / "models" / model;
    ModelWeights w = model_weights_load(dir.string());
    w.base_quant = GetParam();
    Example ex;
    for (int i = 0; i < 40; ++i) ex.input_ids.push_back((i * 53 + 3) % static_cast<int>(w.config.vocab_size));
    ex.labels = ex.input_ids;
    const Batch batch = batch_from_examples({&ex});
    auto cpu = make_cpu_backend();
    auto gpu = make_cuda_backend(0, DType::BF16);
    const Tensor ref = Qwen35Model(w, *cpu).logits(batch, nullptr);
    const Tensor got = Qwen35Model(w, *gpu).logits(batch, nullptr);
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(got.ptr<float>()[i])) << model;
      e2 += std::pow(double(got.ptr<float>()[i]) - ref.ptr<float>()[i], 2);
      r2 += std::pow(double(ref.ptr<float>()[i]), 2);
    }
    const double rel = std::sqrt(e2 / r2);
    std::printf("[quant] %s %s logits norm-relative error CUDA vs CPU: %.3e\n", quant_format_name(GetParam()), model,
                rel);
    EXPECT_LT(rel, w.config.is_moe() ? 0.2 : 5e-2) << model;
  }
}

TEST(QuantCudaGolden, Fp8CheckpointMatchesTransformersOnTheGpu) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  fs::path dir = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "quant" / "fp8";
  if (!fs::exists(dir)) dir = fs::path("tests") / "goldens" / "quant" / "fp8";
  if (!fs::exists(dir / "golden_eval.json")) GTEST_SKIP() << "no golden " << dir;
  const auto golden = testing_goldens::read_json(dir / "golden_eval.json");
  const auto seqs = testing_goldens::read_jsonl(dir / "golden_eval.jsonl");
  const ModelWeights w = model_weights_load(dir.string());
  ASSERT_EQ(w.base_quant, QuantFormat::FP8);
  auto gpu = make_cuda_backend(0, DType::BF16);
  Qwen35Model model(w, *gpu);
  const auto [sum, n] = testing_goldens::loss_each_sequence(model, seqs);
  const double hf = golden["loss"].get<double>();
  EXPECT_EQ(n, golden["count"].get<int64_t>());
  const double loss_rel = std::fabs(sum / n - hf) / hf;
  const Tensor logits = model.logits(batch_from_examples({&seqs[0]}), nullptr);
  const auto& ref = golden["logits_first"];
  ASSERT_EQ(logits.rows(), static_cast<int64_t>(ref.size()));
  double e2 = 0, r2 = 0;
  for (int64_t t = 0; t < logits.rows(); ++t)
    for (int64_t v = 0; v < logits.cols(); ++v) {
      const double r = ref[t][v].get<double>();
      e2 += std::pow(double(logits.ptr<float>()[t * logits.cols() + v]) - r, 2);
      r2 += r * r;
    }
  const double logits_rel = std::sqrt(e2 / r2);
  std::printf("[quant golden] fp8 on CUDA: loss %.7f vs HF %.7f (rel %.2e), logits norm-rel %.2e\n", sum / n, hf,
              loss_rel, logits_rel);
  EXPECT_LE(loss_rel, 1e-2);
  EXPECT_LE(logits_rel, 5e-2);
}

INSTANTIATE_TEST_SUITE_P(Cuda, QuantCuda, ::testing::Values(QuantFormat::FP8, QuantFormat::NF4),
                         [](const ::testing::TestParamInfo<QuantFormat>& i) {
                           return std::string(quant_format_name(i.param));
                         });

}  // namespace
}  // namespace deltatune
