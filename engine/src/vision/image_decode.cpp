#include "vision/image_decode.h"

#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/error.h"

namespace deltatune {
namespace {

// PIL's alpha_composite of an RGBA image onto opaque white (libImaging/AlphaComposite.c, 7 extra bits of
// precision, divisions by 255 rounded with two shifts), which is what transformers' convert_to_rgb does.
uint8_t composite_on_white(uint32_t c, uint32_t a) {
  constexpr uint32_t kBits = 7;
  if (a == 0) return 255;
  const uint32_t blend = 255 * (255 - a);
  const uint32_t outa255 = a * 255 + blend;
  const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / outa255;
  const uint32_t coef2 = 255 * (1u << kBits) - coef1;
  const uint32_t t = c * coef1 + 255 * coef2 + (0x80u << kBits);
  return uint8_t(((((t >> 8) + t) >> 8)) >> kBits);
}

RgbImage rgba_to_rgb(int64_t w, int64_t h, const uint8_t* rgba) {
  RgbImage out{w, h, std::vector<uint8_t>(size_t(w * h * 3))};
  for (int64_t i = 0; i < w * h; ++i) {
    const uint8_t* p = rgba + i * 4;
    for (int c = 0; c < 3; ++c) out.rgb[size_t(i * 3 + c)] = composite_on_white(p[c], p[3]);
  }
  return out;
}

void check_size(int64_t w, int64_t h, int64_t max_pixels, const std::string& name) {
  check(w > 0 && h > 0, name + ": image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  check(w * h <= max_pixels, name + ": image is " + std::to_string(w) + "x" + std::to_string(h) +
                                 " pixels, more than the limit of " + std::to_string(max_pixels));
}

// ---- PNG ------------------------------------------------------------------------------------------------

struct PngReader {
  const std::vector<uint8_t>* bytes;
  size_t pos = 0;
  std::string error;
};

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->pos + n > r->bytes->size()) png_error(png, "file ends before the image does (truncated)");
  std::memcpy(out, r->bytes->data() + r->pos, n);
  r->pos += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  r->error = msg;
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

RgbImage decode_png(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  PngReader reader{&bytes, 0, {}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_on_error, png_on_warning);
  check(png != nullptr, name + ": libpng could not start");
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> rgba;
  std::vector<png_bytep> rows;
  png_uint_32 w = 0, h = 0;
  // Nothing with a destructor may be created between setjmp and a longjmp back to it.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw Error(name + ": corrupt PNG (" + reader.error + ")");
  }
  png_set_read_fn(png, &reader, png_read_bytes);
  png_read_info(png, info);
  w = png_get_image_width(png, info);
  h = png_get_image_height(png, info);
  if (int64_t(w) * int64_t(h) > max_pixels || w == 0 || h == 0) {
    png_destroy_read_struct(&png, &info, nullptr);
    check_size(w, h, max_pixels, name);
  }
  // PIL keeps the high byte of 16-bit samples; palettes, low bit depths and tRNS become RGBA.
  png_set_strip_16(png);
  png_set_expand(png);
  png_set_gray_to_rgb(png);
  png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  const int passes = png_set_interlace_handling(png);
  (void)passes;
  png_read_update_info(png, info);
  rgba.resize(size_t(w) * h * 4);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = rgba.data() + size_t(y) * w * 4;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return rgba_to_rgb(w, h, rgba.data());
}

// ---- JPEG -----------------------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  cinfo->err->format_message(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_on_warning(j_common_ptr cinfo, int level) {
  // A corrupt-data warning (level -1) is an error here: PIL would refuse the truncated file.
  if (level < 0) jpeg_on_error(cinfo);
}

RgbImage decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_warning;
  std::vector<uint8_t> rgb;
  bool too_big = false;
  int64_t w = 0, h = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw Error(name + ": corrupt JPEG (" + std::string(err.message) + ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  w = cinfo.image_width;
  h = cinfo.image_height;
  if (w * h > max_pixels) too_big = true;
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (too_big || cmyk) {
    jpeg_destroy_decompress(&cinfo);
    check(!cmyk, name + ": CMYK JPEG images are not supported (convert the image to RGB)");
    check_size(w, h, max_pixels, name);
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  rgb.resize(size_t(w * h * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = rgb.data() + size_t(cinfo.output_scanline) * size_t(w) * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return RgbImage{w, h, std::move(rgb)};
}

// ---- WebP -----------------------------------------------------------------------------------------------

RgbImage decode_webp(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  WebPBitstreamFeatures features{};
  check(WebPGetFeatures(bytes.data(), bytes.size(), &features) == VP8_STATUS_OK, name + ": corrupt WebP header");
  check(!features.has_animation, name + ": animated WebP images are not supported");
  check_size(features.width, features.height, max_pixels, name);
  const int64_t w = features.width, h = features.height;
  std::vector<uint8_t> rgba(size_t(w * h * 4));
  check(WebPDecodeRGBAInto(bytes.data(), bytes.size(), rgba.data(), rgba.size(), int(w * 4)) != nullptr,
        name + ": corrupt WebP image data");
  return rgba_to_rgb(w, h, rgba.data());
}

}  // namespace

ImageFormat image_format_sniff(const std::vector<uint8_t>& b) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), png_sig, 8) == 0) return ImageFormat::png;
  if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return ImageFormat::jpeg;
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return ImageFormat::webp;
  return ImageFormat::unknown;
}

RgbImage image_decode_bytes(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  switch (image_format_sniff(bytes)) {
    case ImageFormat::png:
      return decode_png(bytes, name, max_pixels);
    case ImageFormat::jpeg:
      return decode_jpeg(bytes, name, max_pixels);
    case ImageFormat::webp:
      return decode_webp(bytes, name, max_pixels);
    case ImageFormat::unknown:
      break;
  }
  throw Error(name + ": not a PNG, JPEG or WebP image (" + std::to_string(bytes.size()) +
              " bytes, unknown signature)");
}

RgbImage image_decode_file(const std::string& path, int64_t max_pixels) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), path + ": image file not found or not readable");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!in.bad(), path + ": read error");
  return image_decode_bytes(bytes, path, max_pixels);
}

}  // namespace deltatune
