// Image parts of chat rows: paths relative to the dataset file, file:// URLs, the render order, bad parts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "vision/chat_images.h"

namespace deltatune {
namespace {

using ojson = nlohmann::ordered_json;

TEST(VisionChatImages, PathsInRenderOrderRelativeToTheDataset) {
  const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "image", "image": "img/a.png"}, {"type": "text", "text": "and"},
                                 {"type": "image", "image": "file:///data/my%20pics/b.jpg"}]},
    {"role": "assistant", "content": "two"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "/abs/c.webp"}},
                                 {"image": "../d.png"}]}])");
  EXPECT_EQ(chat_image_paths(messages, "/corpus/sets/train.jsonl", "train.jsonl:1"),
            (std::vector<std::string>{"/corpus/sets/img/a.png", "/data/my pics/b.jpg", "/abs/c.webp", "/corpus/d.png"}));
}

TEST(VisionChatImages, BadPartsAreNamedWithTheRow) {
  auto err = [](const char* parts) {
    try {
      chat_image_paths(ojson::parse(std::string(R"([{"role": "user", "content": )") + parts + "}]"), "/d/x.jsonl",
                       "x.jsonl:4");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(R"([{"type": "image"}])").find("x.jsonl:4: an image part needs"), std::string::npos);
  EXPECT_NE(err(R"([{"type": "image", "image": 5}])").find("x.jsonl:4: an image part needs"), std::string::npos);
  EXPECT_NE(err(R"([{"type": "image", "image": "https://example.com/a.png"}])").find("nothing is downloaded"),
            std::string::npos);
  EXPECT_NE(err(R"([{"type": "image", "image": "file://server/a.png"}])").find("names a host"), std::string::npos);
  EXPECT_EQ(err(R"([{"type": "text", "text": "no image"}])"), "");
}

}  // namespace
}  // namespace deltatune
