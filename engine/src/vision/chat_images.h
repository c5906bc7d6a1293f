// The images of a chat row: content parts {"type": "image", "image": PATH or "file://" URL} (also
// {"type": "image_url", "image_url": {"url": ...}} and a bare {"image": ...}, which HF's chat templates treat as
// images too), in the order the template renders them (messages in order, parts in order). A relative path is
// relative to the dataset file's folder.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deltatune {

// Throws Error("source: ...") for an image part whose location is not a string, is empty, or is a URL of a
// scheme other than file:// (nothing is downloaded), and for a file:// URL with a host.
std::vector<std::string> chat_image_paths(const nlohmann::ordered_json& messages, const std::string& dataset_path,
                                          const std::string& source);

}  // namespace deltatune
