// `deltatune tokenize` and `deltatune prepare` end to end on a tiny tokenizer folder.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

class DataCli : public ::testing::Test {
 protected:
  // One folder per test: ctest runs the tests of this fixture in parallel processes.
  fs::path dir;
  void SetUp() override {
    dir = fs::path(DT_BINARY_DIR) / "test_tmp" /
          ("data_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir / "model");
    fs::copy_file(fs::path(DT_SOURCE_DIR) / "tests/goldens/tokenizer/tiny_qwen.json",
                  dir / "model/tokenizer.json");
    nlohmann::json cfg;
    cfg["eos_token"] = "<|im_end|>";
    std::ifstream t(fs::path(DT_SOURCE_DIR) / "tests/goldens/chat/chatml.jinja");
    cfg["chat_template"] = std::string(std::istreambuf_iterator<char>(t), {});
    std::ofstream(dir / "model/tokenizer_config.json") << cfg.dump();
  }
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(DataCli, TokenizePlainAndChat) {
  std::ofstream(dir / "in.jsonl") << R"({"text":"Hello world"})"
                                  << "\n";
  int rc = 0;
  const std::string cli = DT_CLI_PATH;
  auto out =
      run(cli + " tokenize --model " + (dir / "model").string() + " < " + (dir / "in.jsonl").string(), &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto tok = Tokenizer::from_file((dir / "model").string());
  EXPECT_EQ(nlohmann::json::parse(out)["ids"].get<std::vector<int32_t>>(), tok.encode("Hello world"));

  std::ofstream(dir / "chat.jsonl")
      << R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}]})"
      << "\n";
  out = run(
      cli + " tokenize --chat --model " + (dir / "model").string() + " < " + (dir / "chat.jsonl").string(),
      &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["text"], "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n");
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  const auto labels = j["labels"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), labels.size());
  std::string trained;
  for (size_t i = 0; i < ids.size(); ++i)
    if (labels[i] != -100) trained += tok.decode({ids[i]});
  EXPECT_EQ(trained, "Yo<|im_end|>");

  std::ofstream(dir / "bad.jsonl") << "{\"text\": 1}\n";
  run(cli + " tokenize --model " + (dir / "model").string() + " < " + (dir / "bad.jsonl").string() + " 2>&1",
      &rc);
  EXPECT_NE(rc, 0);
}

TEST_F(DataCli, PrepareWritesStatsAndTokens) {
  std::ofstream data(dir / "d.jsonl");
  for (int i = 0; i < 20; ++i)
    data << R"({"text":"row )" << i << R"("})"
         << "\n";
  data.close();
  std::ofstream(dir / "run.yaml") << "base_model: model\ndatasets:\n  - path: d.jsonl\nsequence_len: 16\n"
                                     "sample_packing: true\ndataset_prepared_path: cache\noutput_dir: out\n";
  int rc = 0;
  const auto out = run(std::string(DT_CLI_PATH) + " prepare " + (dir / "run.yaml").string() + " --out " +
                           (dir / "tokens.jsonl").string() + " 2>/dev/null",
                       &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("train: examples 20"), std::string::npos) << out;
  EXPECT_NE(out.find("packing efficiency"), std::string::npos) << out;
  std::ifstream f(dir / "tokens.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["input_ids"].size(), j["labels"].size());
    ++lines;
  }
  EXPECT_EQ(lines, 20);
}

}  // namespace
}  // namespace deltatune
