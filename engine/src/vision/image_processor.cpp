#include "vision/image_processor.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"

namespace deltatune {
namespace {

// Python's round(): nearest, ties to even (std::nearbyint in the default rounding mode).
int64_t python_round(double x) { return int64_t(std::nearbyint(x)); }

// ---- PIL's resample (libImaging/Resample.c) -------------------------------------------------------------

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

struct ResampleCoeffs {
  int64_t ksize = 0;
  std::vector<int64_t> xmin, count;  // per output pixel: first input pixel and how many
  std::vector<int32_t> k;            // (out, ksize) fixed-point weights
};

ResampleCoeffs precompute_coeffs(int64_t in_size, int64_t out_size) {
  constexpr double kSupport = 2.0;
  const double scale = double(in_size) / double(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = kSupport * filterscale;
  ResampleCoeffs c;
  c.ksize = int64_t(std::ceil(support)) * 2 + 1;
  c.xmin.resize(size_t(out_size));
  c.count.resize(size_t(out_size));
  c.k.assign(size_t(out_size * c.ksize), 0);
  std::vector<double> w(size_t(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (double(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = int64_t(center - support + 0.5);  // C's truncating (int) cast, as PIL does
    if (xmin < 0) xmin = 0;
    int64_t xmax = int64_t(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      w[size_t(x)] = bicubic_filter((double(x + xmin) - center + 0.5) * ss);
      ww += w[size_t(x)];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      const double f = v * double(1 << kPrecisionBits);
      c.k[size_t(xx * c.ksize + x)] = v < 0 ? int32_t(-0.5 + f) : int32_t(0.5 + f);
    }
    c.xmin[size_t(xx)] = xmin;
    c.count[size_t(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t v) { return uint8_t(std::clamp(v >> kPrecisionBits, 0, 255)); }

RgbImage resample_horizontal(const RgbImage& in, int64_t out_w) {
  const ResampleCoeffs c = precompute_coeffs(in.width, out_w);
  RgbImage out{out_w, in.height, std::vector<uint8_t>(size_t(out_w * in.height * 3))};
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* row = in.rgb.data() + y * in.width * 3;
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const int32_t* k = c.k.data() + xx * c.ksize;
      int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int64_t x = 0; x < c.count[size_t(xx)]; ++x) {
        const uint8_t* p = row + (x + c.xmin[size_t(xx)]) * 3;
        for (int ch = 0; ch < 3; ++ch) ss[ch] += int32_t(p[ch]) * k[x];
      }
      for (int ch = 0; ch < 3; ++ch) out.rgb[size_t((y * out_w + xx) * 3 + ch)] = clip8(ss[ch]);
    }
  }
  return out;
}

RgbImage resample_vertical(const RgbImage& in, int64_t out_h) {
  const ResampleCoeffs c = precompute_coeffs(in.height, out_h);
  RgbImage out{in.width, out_h, std::vector<uint8_t>(size_t(in.width * out_h * 3))};
  for (int64_t yy = 0; yy < out_h; ++yy) {
    const int32_t* k = c.k.data() + yy * c.ksize;
    for (int64_t x = 0; x < in.width; ++x) {
      int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int64_t y = 0; y < c.count[size_t(yy)]; ++y) {
        const uint8_t* p = in.rgb.data() + ((y + c.xmin[size_t(yy)]) * in.width + x) * 3;
        for (int ch = 0; ch < 3; ++ch) ss[ch] += int32_t(p[ch]) * k[y];
      }
      for (int ch = 0; ch < 3; ++ch) out.rgb[size_t((yy * in.width + x) * 3 + ch)] = clip8(ss[ch]);
    }
  }
  return out;
}

template <typename T>
T json_value(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": `" + key + "` has the wrong type (" + j[key].dump() + ")");
  }
}

}  // namespace

ImageProcessorConfig image_processor_config_read(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "preprocessor_config.json").string();
  check(std::filesystem::exists(path), path + ": not found (a vision model needs its image processor's settings)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  check(j.is_object(), path + ": expected a JSON object");
  ImageProcessorConfig c;
  // HF's Qwen2VLImageProcessor class defaults where the file says nothing (patch 14 there; Qwen3.5 writes 16).
  c.patch_size = json_value<int64_t>(j, "patch_size", 14, path);
  c.temporal_patch_size = json_value<int64_t>(j, "temporal_patch_size", 2, path);
  c.merge_size = json_value<int64_t>(j, "merge_size", 2, path);
  if (j.contains("size") && j["size"].is_object()) {
    c.min_pixels = json_value<int64_t>(j["size"], "shortest_edge", c.min_pixels, path);
    c.max_pixels = json_value<int64_t>(j["size"], "longest_edge", c.max_pixels, path);
  }
  c.min_pixels = json_value<int64_t>(j, "min_pixels", c.min_pixels, path);
  c.max_pixels = json_value<int64_t>(j, "max_pixels", c.max_pixels, path);
  c.rescale_factor = json_value<double>(j, "rescale_factor", c.rescale_factor, path);
  c.do_resize = json_value<bool>(j, "do_resize", true, path);
  c.do_rescale = json_value<bool>(j, "do_rescale", true, path);
  c.do_normalize = json_value<bool>(j, "do_normalize", true, path);
  for (const char* key : {"image_mean", "image_std"}) {
    if (!j.contains(key)) continue;
    std::vector<float> v = json_value<std::vector<float>>(j, key, {}, path);
    if (v.size() == 1) v.assign(3, v[0]);
    check(v.size() == 3, path + ": `" + key + "` must have 3 values (one per RGB channel)");
    auto& dst = std::string(key) == "image_mean" ? c.image_mean : c.image_std;
    std::copy(v.begin(), v.end(), dst.begin());
  }
  const int64_t resample = json_value<int64_t>(j, "resample", 3, path);
  check(resample == 3, path + ": resample " + std::to_string(resample) + " is not supported (only bicubic, 3)");
  check(c.patch_size > 0 && c.temporal_patch_size > 0 && c.merge_size > 0,
        path + ": patch_size, temporal_patch_size and merge_size must be positive");
  check(c.min_pixels > 0 && c.max_pixels >= c.min_pixels, path + ": expected 0 < min_pixels <= max_pixels");
  for (float s : c.image_std) check(s != 0.f, path + ": image_std has a zero");
  return c;
}

std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels, const std::string& name) {
  check(height >= factor && width >= factor,
        name + ": image is " + std::to_string(width) + "x" + std::to_string(height) +
            " pixels; both sides must be at least " + std::to_string(factor) + " (patch size x merge size)");
  const double ratio = double(std::max(height, width)) / double(std::min(height, width));
  check(ratio <= 200, name + ": aspect ratio " + std::to_string(ratio) + " is above 200 (HF refuses it too)");
  const double f = double(factor);
  int64_t h_bar = python_round(double(height) / f) * factor;
  int64_t w_bar = python_round(double(width) / f) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(double(height * width) / double(max_pixels));
    h_bar = int64_t(std::floor(double(height) / beta / f)) * factor;
    w_bar = int64_t(std::floor(double(width) / beta / f)) * factor;
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / double(height * width));
    h_bar = int64_t(std::ceil(double(height) * beta / f)) * factor;
    w_bar = int64_t(std::ceil(double(width) * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

RgbImage image_resize_bicubic(const RgbImage& in, int64_t out_width, int64_t out_height) {
  check(out_width > 0 && out_height > 0, "image_resize_bicubic: output size must be positive");
  // PIL skips a pass whose size does not change (and returns a copy when neither does).
  RgbImage out = in;
  if (out_width != in.width) out = resample_horizontal(out, out_width);
  if (out_height != in.height) out = resample_vertical(out, out_height);
  return out;
}

ProcessedImage image_preprocess(const RgbImage& image, const ImageProcessorConfig& cfg, const std::string& name) {
  const int64_t patch = cfg.patch_size, merge = cfg.merge_size, tp = cfg.temporal_patch_size;
  RgbImage img = image;
  if (cfg.do_resize) {
    const auto [h, w] = smart_resize(image.height, image.width, patch * merge, cfg.min_pixels, cfg.max_pixels, name);
    img = image_resize_bicubic(image, w, h);
  }
  check(img.height % (patch * merge) == 0 && img.width % (patch * merge) == 0,
        name + ": image size " + std::to_string(img.width) + "x" + std::to_string(img.height) +
            " is not a multiple of patch x merge (" + std::to_string(patch * merge) + ")");
  // transformers rescales in float64 and stores float32, then normalizes in float32.
  std::array<float, 256> level{};
  for (int v = 0; v < 256; ++v) level[size_t(v)] = cfg.do_rescale ? float(double(v) * cfg.rescale_factor) : float(v);
  const int64_t hw = img.height * img.width;
  std::vector<float> chw(size_t(3 * hw));
  for (int64_t i = 0; i < hw; ++i)
    for (int64_t c = 0; c < 3; ++c) {
      float x = level[img.rgb[size_t(i * 3 + c)]];
      if (cfg.do_normalize) x = (x - cfg.image_mean[size_t(c)]) / cfg.image_std[size_t(c)];
      chw[size_t(c * hw + i)] = x;
    }
  ProcessedImage out;
  out.grid_t = 1;  // one frame, repeated to the temporal patch
  out.grid_h = img.height / patch;
  out.grid_w = img.width / patch;
  const int64_t cols = 3 * tp * patch * patch;
  out.pixel_values.resize(size_t(out.rows() * cols));
  float* dst = out.pixel_values.data();
  for (int64_t bh = 0; bh < out.grid_h / merge; ++bh)
    for (int64_t bw = 0; bw < out.grid_w / merge; ++bw)
      for (int64_t my = 0; my < merge; ++my)
        for (int64_t mx = 0; mx < merge; ++mx) {
          const int64_t y0 = (bh * merge + my) * patch, x0 = (bw * merge + mx) * patch;
          for (int64_t c = 0; c < 3; ++c)
            for (int64_t t = 0; t < tp; ++t)
              for (int64_t py = 0; py < patch; ++py)
                for (int64_t px = 0; px < patch; ++px) *dst++ = chw[size_t(c * hw + (y0 + py) * img.width + x0 + px)];
        }
  return out;
}

}  // namespace deltatune
