// Image decoding and Qwen3.5's image processor against transformers (tests/goldens/vision/
// make_processor_goldens.py: PIL's decode + convert_to_rgb, and the processor's pixel_values and grid for each
// image: PNG RGB / RGBA / gray / palette, JPEG, lossless WebP, upscaled and downscaled).
// Decoded pixels must be identical. pixel_values: max |diff| <= 1e-6 (the same float32 arithmetic; any
// resample difference of one 8-bit level would show as 2/255 = 7.8e-3). Measured: 0 decode mismatches, max
// |diff| 0 on all six images. The goldens come from transformers' PIL backend (Qwen2VLImageProcessorPil, what
// AutoImageProcessor gives without torchvision); its torchvision backend resamples uint8 differently and
// differs from PIL by one 8-bit level in 0.14-0.63% of these values (measured with torchvision 0.29).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <unistd.h>

#include "error_text.h"
#include "../golden_files.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kVision = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision";

TEST(VisionProcessor, DecodeAndPixelValuesMatchTransformers) {
  const auto meta = testing_goldens::read_json(kVision / "processor_golden.json");
  const SafetensorsFile golden((kVision / "processor_golden.safetensors").string());
  const ImageProcessorConfig cfg = image_processor_config_read(kVision.string());
  ASSERT_GE(meta["images"].size(), 6u);
  for (size_t i = 0; i < meta["images"].size(); ++i) {
    const auto& row = meta["images"][i];
    const std::string file = row["file"].get<std::string>();
    SCOPED_TRACE(file);
    const RgbImage img = image_decode_file((kVision / file).string());
    const Tensor decoded = golden.get("decoded_" + std::to_string(i));
    ASSERT_EQ(img.height, decoded.shape[0]);
    ASSERT_EQ(img.width, decoded.shape[1]);
    int64_t decode_mismatches = 0;
    for (size_t k = 0; k < img.rgb.size(); ++k) decode_mismatches += img.rgb[k] != decoded.ptr<uint8_t>()[k];
    EXPECT_EQ(decode_mismatches, 0);

    const ProcessedImage p = image_preprocess(img, cfg, file);
    EXPECT_EQ(p.grid_t, row["image_grid_thw"][0].get<int64_t>());
    EXPECT_EQ(p.grid_h, row["image_grid_thw"][1].get<int64_t>());
    EXPECT_EQ(p.grid_w, row["image_grid_thw"][2].get<int64_t>());
    const Tensor ref = golden.get("pixel_values_" + std::to_string(i));
    ASSERT_EQ(p.rows(), ref.shape[0]);
    ASSERT_EQ(3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size, ref.shape[1]);
    double max_diff = 0;
    for (int64_t k = 0; k < ref.numel(); ++k)
      max_diff = std::max(max_diff, double(std::abs(p.pixel_values[size_t(k)] - ref.ptr<float>()[k])));
    EXPECT_LE(max_diff, 1e-6);
    std::printf("%s: %lldx%lld -> grid %lldx%lld, max |pixel diff| %.3g\n", file.c_str(), (long long)img.width,
                (long long)img.height, (long long)p.grid_h, (long long)p.grid_w, max_diff);
  }
}

TEST(VisionProcessor, SmartResizeFollowsHf) {
  // Python's round is half-to-even: 48/32 = 1.5 -> 2, 80/32 = 2.5 -> 2.
  EXPECT_EQ(smart_resize(48, 80, 32, 32 * 32, 1 << 20, "x"), (std::array<int64_t, 2>{64, 64}));
  // Above max_pixels: floor after scaling; below min_pixels: ceil.
  EXPECT_EQ(smart_resize(1000, 1000, 32, 1024, 256 * 256, "x"), (std::array<int64_t, 2>{256, 256}));
  EXPECT_EQ(smart_resize(40, 40, 32, 128 * 128, 1 << 20, "x"), (std::array<int64_t, 2>{128, 128}));
}

TEST(VisionProcessor, ConfigReadsQwenSettings) {
  const ImageProcessorConfig cfg = image_processor_config_read(kVision.string());
  EXPECT_EQ(cfg.patch_size, 16);
  EXPECT_EQ(cfg.merge_size, 2);
  EXPECT_EQ(cfg.temporal_patch_size, 2);
  EXPECT_EQ(cfg.min_pixels, 2048);
  EXPECT_EQ(cfg.max_pixels, 6144);
  EXPECT_FLOAT_EQ(cfg.image_mean[1], 0.5f);
}

std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(VisionProcessor, BadImagesNameTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("dt_vision_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return (dir / name).string();
  };
  const std::string missing = (dir / "missing.png").string();
  EXPECT_NE(error_of([&] { image_decode_file(missing); }).find(missing + ": image file not found"), std::string::npos);

  const std::string text = write("notes.png", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_NE(error_of([&] { image_decode_file(text); }).find(text + ": not a PNG, JPEG or WebP"), std::string::npos);

  for (const char* name : {"images/rgb_36x40.png", "images/photo_121x83.jpg", "images/lossless_77x120.webp"}) {
    std::vector<uint8_t> bytes = file_bytes(kVision / name);
    bytes.resize(bytes.size() / 2);
    const std::string cut = write(fs::path(name).filename().string(), bytes);
    const std::string err = error_of([&] { image_decode_file(cut); });
    EXPECT_NE(err.find(cut + ": corrupt"), std::string::npos) << err;
  }

  const std::string png = (kVision / "images" / "rgb_36x40.png").string();
  const std::string huge = error_of([&] { image_decode_file(png, 36 * 40 - 1); });
  EXPECT_NE(huge.find(png + ": image is 36x40 pixels, more than the limit"), std::string::npos) << huge;

  const RgbImage small{20, 40, std::vector<uint8_t>(20 * 40 * 3, 7)};
  const std::string too_small = error_of([&] { image_preprocess(small, ImageProcessorConfig{}, "tiny.png"); });
  EXPECT_NE(too_small.find("tiny.png: image is 20x40 pixels; both sides must be at least 32"), std::string::npos)
      << too_small;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltatune
