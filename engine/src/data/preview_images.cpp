#include "data/preview_images.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"

namespace deltatune {

PreviewImage preview_image(const std::string& path, const VisionDataConfig* vision, const std::string& source) {
  PreviewImage p;
  p.path = path;
  const std::string name = source + ": image " + path;
  try {
    vision_require(vision, source);
    const ImageProcessorConfig& cfg = vision->processor;
    const RgbImage img = image_decode_file(path);
    std::array<int64_t, 2> hw{img.height, img.width};
    const int64_t factor = cfg.patch_size * cfg.merge_size;
    if (cfg.do_resize) hw = smart_resize(img.height, img.width, factor, cfg.min_pixels, cfg.max_pixels, name);
    p.width = img.width;
    p.height = img.height;
    p.resized_height = hw[0];
    p.resized_width = hw[1];
    p.grid_t = 1;  // one frame, repeated to the temporal patch (image_preprocess)
    p.grid_h = hw[0] / cfg.patch_size;
    p.grid_w = hw[1] / cfg.patch_size;
    p.patches = p.grid_t * p.grid_h * p.grid_w;
    p.tokens = p.patches / (cfg.merge_size * cfg.merge_size);
    const double scale = std::min(1.0, static_cast<double>(kPreviewThumbnailSide) /
                                           static_cast<double>(std::max(img.width, img.height)));
    if (scale < 1.0) {
      const int64_t w = std::max<int64_t>(1, std::llround(static_cast<double>(img.width) * scale));
      const int64_t h = std::max<int64_t>(1, std::llround(static_cast<double>(img.height) * scale));
      const RgbImage thumb = image_resize_bicubic(img, w, h);
      p.thumbnail_width = thumb.width;
      p.thumbnail_height = thumb.height;
      p.thumbnail_rgb = thumb.rgb;
    } else {
      p.thumbnail_width = img.width;
      p.thumbnail_height = img.height;
      p.thumbnail_rgb = img.rgb;
    }
  } catch (const Error& e) {
    const std::string path_copy = p.path;
    p = PreviewImage{};
    p.path = path_copy;
    const std::string what = e.what();
    // Decoder errors name only the file: say which row it is.
    p.error = what.rfind(source, 0) == 0 ? what : source + ": " + what;
  }
  return p;
}

}  // namespace deltatune
