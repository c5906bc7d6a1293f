// The vision-language path on the CUDA backend: the golden sequence with two images of tests/goldens/vision
// (merged tokens from the host tower replacing the image-token rows, interleaved multimodal RoPE) against
// transformers' fp32 loss. Bars: bf16 1e-3 relative (issue 35), fp32 1e-5 relative (the CPU bar).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../golden_files.h"
#include "../vision_golden_batch.h"
#include "backend/backend.h"
#include "data/batch.h"
#include "data/batch_images.h"
#include "io/safetensors.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

fs::path vision_goldens() { return testing_goldens::goldens_dir() / "vision"; }

TEST(CudaVision, LossWithImagesMatchesTransformers) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = vision_goldens();
  const ModelWeights w = model_weights_load((dir / "model").string());
  const VisionConfig vcfg = vision_config_read((dir / "model").string());
  const auto vision = std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg));
  const Batch b = testing_goldens::vision_golden_batch(dir, vcfg);
  const double hf = testing_goldens::read_json(dir / "model_golden.json")["loss"].get<double>();
  for (const auto& [dtype, bar] : {std::pair{DType::BF16, 1e-3}, std::pair{DType::F32, 1e-5}}) {
    auto be = make_cuda_backend(0, dtype);
    Qwen35Model model(w, *be);
    model.set_vision(vision);
    const StepOutput out = model.step(b, nullptr, StepOptions{});
    const double loss = out.loss_sum / double(out.targets), rel = std::abs(loss - hf) / hf;
    std::printf("[vision] %s loss %.7f, transformers fp32 %.7f, rel %.2e\n", dtype == DType::BF16 ? "bf16" : "fp32",
                loss, hf, rel);
    EXPECT_LE(rel, bar);
  }
}

}  // namespace
}  // namespace deltatune
