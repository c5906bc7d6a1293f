// The vision golden sequence (tests/goldens/vision) as a batch with its images, shared by the CPU and CUDA tests.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "golden_files.h"
#include "data/batch.h"
#include "data/batch_images.h"
#include "io/safetensors.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace deltatune::testing_goldens {

inline std::vector<int32_t> i32_values(const Tensor& t) { return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()}; }

// `dir`: tests/goldens/vision. The golden input ids and labels, with the images of model_golden.json's
// images_in_sequence decoded and preprocessed as the model's preprocessor_config.json says.
inline Batch vision_golden_batch(const std::filesystem::path& dir, const VisionConfig& vcfg) {
  const SafetensorsFile golden((dir / "model_golden.safetensors").string());
  const auto proc = read_json(dir / "processor_golden.json");
  const auto meta = read_json(dir / "model_golden.json");
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
  return b;
}

}  // namespace deltatune::testing_goldens
