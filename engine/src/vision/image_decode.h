// Image files to 8-bit RGB, as transformers sees them after `PIL.Image.open(path)` and its convert_to_rgb
// (an image with alpha is composited onto white the way PIL's alpha_composite does it).
// Decoders: libpng (PNG), libjpeg-turbo (JPEG), libwebp (WebP), Debian 12's packages libpng-dev,
// libjpeg62-turbo-dev and libwebp-dev. They are the reference decoders of their formats, maintained, and
// the ones Pillow itself links, so a decoded JPEG's pixels are the same numbers PIL gives (both use libjpeg's
// default integer IDCT and fancy upsampling); a single-header decoder (stb_image) has its own IDCT and
// upsampler and would not give PIL's pixels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;  // (height, width, 3) row-major
};

enum class ImageFormat { png, jpeg, webp, unknown };

// From the file's first bytes (its signature), not its name.
ImageFormat image_format_sniff(const std::vector<uint8_t>& bytes);

// Decodes a whole file. Throws deltatune::Error naming `path` for a missing, unreadable, unknown-format or
// corrupt file, and for images larger than `max_pixels` (a decompression bomb guard, checked before the
// pixels are allocated).
RgbImage image_decode_file(const std::string& path, int64_t max_pixels = int64_t(1) << 28);

// Same for bytes already in memory; `name` is what errors call the image.
RgbImage image_decode_bytes(const std::vector<uint8_t>& bytes, const std::string& name,
                            int64_t max_pixels = int64_t(1) << 28);

}  // namespace deltatune
