#include "vision/image_placeholders.h"

#include "core/error.h"

namespace deltatune {

std::string image_placeholders_expand(const std::string& text, const std::string& image_token,
                                      const std::vector<int64_t>& tokens_per_image, const std::string& source) {
  check(!image_token.empty(), source + ": empty image token");
  std::string out;
  out.reserve(text.size());
  size_t pos = 0, image = 0;
  for (size_t hit; (hit = text.find(image_token, pos)) != std::string::npos; pos = hit + image_token.size()) {
    check(image < tokens_per_image.size(), source + ": the rendered chat has more " + image_token +
                                               " placeholders than the row has images (" +
                                               std::to_string(tokens_per_image.size()) + ")");
    out.append(text, pos, hit - pos);
    for (int64_t k = 0; k < tokens_per_image[image]; ++k) out += image_token;
    ++image;
  }
  out.append(text, pos, std::string::npos);
  check(image == tokens_per_image.size(), source + ": the row has " + std::to_string(tokens_per_image.size()) +
                                              " images but the rendered chat has " + std::to_string(image) + " " +
                                              image_token + " placeholders");
  return out;
}

}  // namespace deltatune
