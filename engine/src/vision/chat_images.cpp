#include "vision/chat_images.h"

#include <filesystem>

#include "core/error.h"

namespace deltatune {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// file:///abs/path (percent-escapes decoded) or a plain path.
std::string location_to_path(const std::string& loc, const std::string& source) {
  const std::string scheme = "file://";
  if (loc.compare(0, scheme.size(), scheme) != 0) {
    const size_t colon = loc.find("://");
    check(colon == std::string::npos,
          source + ": image `" + loc + "` is a URL; only local paths and file:// URLs are read (nothing is downloaded)");
    return loc;
  }
  const std::string rest = loc.substr(scheme.size());
  check(!rest.empty() && (rest[0] == '/' || rest.compare(0, 10, "localhost/") == 0),
        source + ": image URL `" + loc + "` names a host; expected file:///absolute/path");
  const std::string encoded = rest[0] == '/' ? rest : rest.substr(9);
  std::string path;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] == '%' && i + 2 < encoded.size() && hex_value(encoded[i + 1]) >= 0 && hex_value(encoded[i + 2]) >= 0) {
      path += char(hex_value(encoded[i + 1]) * 16 + hex_value(encoded[i + 2]));
      i += 2;
    } else {
      path += encoded[i];
    }
  }
  return path;
}

const nlohmann::ordered_json* image_location(const nlohmann::ordered_json& part) {
  if (!part.is_object()) return nullptr;
  if (part.contains("image")) return &part["image"];
  if (part.contains("image_url")) {
    const auto& u = part["image_url"];
    return u.is_object() && u.contains("url") ? &u["url"] : &u;
  }
  if (part.value("type", "") == "image") return &part;  // reported below: no location
  return nullptr;
}

}  // namespace

std::vector<std::string> chat_image_paths(const nlohmann::ordered_json& messages, const std::string& dataset_path,
                                          const std::string& source) {
  std::vector<std::string> out;
  if (!messages.is_array()) return out;
  const std::filesystem::path base = std::filesystem::path(dataset_path).parent_path();
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const auto& part : m["content"]) {
      const nlohmann::ordered_json* loc = image_location(part);
      if (loc == nullptr) continue;
      check(loc != &part && loc->is_string() && !loc->get<std::string>().empty(),
            source + ": an image part needs \"image\": \"path or file:// URL\" (got " + part.dump() + ")");
      const std::filesystem::path p = location_to_path(loc->get<std::string>(), source);
      out.push_back((p.is_absolute() ? p : base / p).lexically_normal().string());
    }
  }
  return out;
}

}  // namespace deltatune
