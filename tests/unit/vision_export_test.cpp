// Export of a vision-language checkpoint's adapter (issue 35), on the tiny random Qwen3_5ForConditionalGeneration
// of tests/goldens/vision with the PEFT adapters of make_lora_goldens.py (lora: text model only; lora_vision:
// text model and the tower's blocks):
//  - the PEFT adapter for the VL class: text keys under base_model.model.model.language_model., tower keys under
//    base_model.model.model.visual. (the class's own prefixes), every golden adapter tensor written back unchanged;
//  - a merged export keeps every model.visual.* tensor the adapter does not change byte for byte, and the merged
//    model fed the golden image sequence gives PEFT's loss of base + adapter (golden.json) within the CPU bar
//    (1e-5 relative).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "../golden_files.h"
#include "../vision_golden_batch.h"
#include "backend/backend.h"
#include "core/error.h"
#include "deltatune/export.h"
#include "io/safetensors.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "vision/vision_tower.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kVision = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("dt_vision_export_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, size_t(a.nbytes())) == 0;
}

void expect_adapter_export(const std::string& folder) {
  TempDir tmp("adapter_" + folder);
  ExportOptions o;
  o.model_dir = (kVision / "model").string();
  o.adapter_dir = (kVision / folder / "adapter").string();
  o.out_dir = (tmp.path / "out").string();
  export_adapter(o);
  const SafetensorsFile golden((kVision / folder / "adapter" / "adapter_model.safetensors").string());
  const SafetensorsFile out((tmp.path / "out" / "adapter_model.safetensors").string());
  ASSERT_EQ(out.entries().size(), golden.entries().size());
  int vision = 0;
  for (const TensorEntry& e : golden.entries()) {
    const std::string& name = e.name;
    SCOPED_TRACE(name);
    const bool tower = name.rfind("base_model.model.model.visual.blocks.", 0) == 0;
    vision += tower;
    EXPECT_TRUE(tower || name.rfind("base_model.model.model.language_model.layers.", 0) == 0);
    ASSERT_TRUE(out.has(name));
    EXPECT_TRUE(same_bytes(host_convert(out.get(name), DType::F32), host_convert(golden.get(name), DType::F32)));
  }
  std::printf("%s: %zu adapter tensors exported as PEFT wrote them (%d of the vision tower)\n", folder.c_str(),
              golden.entries().size(), vision);
}

TEST(VisionExport, AdapterForTheVisionLanguageClass) {
  expect_adapter_export("lora");
  expect_adapter_export("lora_vision");
}

// A causal-LM class has no vision tower: an adapter with tower modules cannot be written for it.
TEST(VisionExport, VisionModulesNeedTheVisionLanguageClass) {
  TempDir tmp("clm");
  ExportOptions o;
  o.model_dir = (kVision / "model").string();
  o.adapter_dir = (kVision / "lora_vision" / "adapter").string();
  o.out_dir = (tmp.path / "out").string();
  o.model_class = "causal_lm";
  EXPECT_THROW(export_adapter(o), Error);
}

void expect_merged_export(const std::string& folder) {
  TempDir tmp("merged_" + folder);
  ExportOptions o;
  o.model_dir = (kVision / "model").string();
  o.adapter_dir = (kVision / folder / "adapter").string();
  o.out_dir = (tmp.path / "merged").string();
  o.merged = true;
  export_adapter(o);
  const CheckpointReader base(o.model_dir), merged(o.out_dir);
  const SafetensorsFile adapter((kVision / folder / "adapter" / "adapter_model.safetensors").string());
  int kept = 0, changed = 0;
  for (const std::string& name : base.names()) {
    if (name.rfind("model.visual.", 0) != 0) continue;
    ASSERT_TRUE(merged.has(name)) << name;
    const std::string module = name.substr(0, name.rfind('.'));  // model.visual.blocks.0.attn.qkv
    const bool adapted = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                         adapter.has("base_model.model." + module + ".lora_A.weight");
    if (adapted) {
      ++changed;
      EXPECT_FALSE(same_bytes(merged.get(name), base.get(name))) << name;
    } else {
      ++kept;
      EXPECT_TRUE(same_bytes(merged.get(name), base.get(name))) << name;
    }
  }
  EXPECT_GT(kept, 0);

  const ModelWeights w = model_weights_load(o.out_dir);
  const VisionConfig vcfg = vision_config_read(o.out_dir);
  auto be = make_cpu_backend();
  Qwen35Model model(w, *be);
  model.set_vision(std::make_shared<VisionWeights>(vision_weights_load(*w.reader, vcfg)));
  const StepOutput out = model.step(testing_goldens::vision_golden_batch(kVision, vcfg), nullptr, StepOptions{});
  const double loss = out.loss_sum / double(out.targets);
  const double peft = testing_goldens::read_json(kVision / folder / "golden.json")["loss"].get<double>();
  std::printf("%s merged: %d tower tensors kept, %d merged; loss %.9f, PEFT base + adapter %.9f, rel %.2e\n",
              folder.c_str(), kept, changed, loss, peft, std::abs(loss - peft) / peft);
  EXPECT_NEAR(loss, peft, 1e-5 * peft);
}

TEST(VisionExport, MergedKeepsTheTowerAndGivesPeftsLoss) {
  expect_merged_export("lora");
  expect_merged_export("lora_vision");
}

}  // namespace
}  // namespace deltatune
