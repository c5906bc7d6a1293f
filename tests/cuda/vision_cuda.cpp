// The vision-language path on the CUDA backend: the golden sequence with two images of tests/goldens/vision
// (merged tokens from the host tower replacing the image-token rows, interleaved multimodal RoPE) against
// transformers' fp32 loss. Bars: bf16 1e-3 relative (issue 35), fp32 1e-5 relative (the CPU bar).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../golden_files.h"
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

std::vector<int32_t> i32_values(const Tensor& t) { return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()}; }

TEST(CudaVision, LossWithImagesMatchesTransformers) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = vision_goldens();
  const ModelWeights w = model_weights_load((dir / "model").string());
  const VisionConfig vcfg = vision_config_read((dir / "model").string());
  const auto vision = std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg));
  const SafetensorsFile golden((dir / "model_golden.safetensors").string());
  const auto proc = testing_goldens::read_json(dir / "processor_golden.json");
  const auto meta = testing_goldens::read_json(dir / "model_golden.json");
  Example ex{i32_values(golden.get("input_ids")), i32_values(golden.get("labels"))};
  Batch b = batch_from_examples({&ex});
  const ImageProcessorConfig pcfg = image_processor_config_read((dir / "model").string());
  std::vector<ProcessedImage> images;
  for (const auto& k : meta["images_in_sequence"]) {
    const std::string file = proc["images"][k.get<size_t>()]["file"].get<std::string>();
    images.push_back(image_preprocess(image_decode_file((dir / file).string()), pcfg, file));
  }
  std::vector<const ProcessedImage*> ptrs;
  for (const auto& im : images) ptrs.push_back(&im);
  batch_set_images(b, ptrs, vcfg, "golden");
  const double hf = meta["loss"].get<double>();
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
