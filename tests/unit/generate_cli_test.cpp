// `deltatune generate` end to end: the HF golden prompts in as input_ids, the HF golden tokens out (one JSON
// line per prompt, in order), and usage errors with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "../generate_goldens.h"

#include "cli_run.h"

namespace fs = std::filesystem;

namespace {

using deltatune::testing_cli::run_cli;

const fs::path kGoldens = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";

TEST(GenerateCli, PromptIdsInGoldenTokensOut) {
  int64_t max_new = 0;
  const auto cases = deltatune::testing_goldens::read_generate_goldens(kGoldens, &max_new);
  const auto& c = cases.at(1);  // dense_vl with its adapter
  ASSERT_EQ(c.name, "dense_vl_lora");
  const fs::path prompts = fs::temp_directory_path() / ("dt_generate_cli_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(prompts);
    for (const auto& p : c.prompts) f << nlohmann::json{{"input_ids", p}}.dump() << "\n";
  }
  const auto r = run_cli("generate --backend cpu --model " + c.model_dir + " --adapter " + c.adapter_dir +
                         " --prompts " + prompts.string() + " --batch 2 --max-new-tokens " + std::to_string(max_new));
  ASSERT_EQ(r.rc, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_LT(i, c.outputs.size());
    EXPECT_EQ(j["index"].get<size_t>(), i);
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), c.outputs[i]) << "prompt " << i;
    EXPECT_EQ(j["prompt_tokens"].get<size_t>(), c.prompts[i].size());
  }
  EXPECT_EQ(i, c.outputs.size());
  fs::remove(prompts);
}

TEST(GenerateCli, BadFlagsAreUsageErrors) {
  const std::string model = (kGoldens / "models" / "moe_tied").string();
  auto r = run_cli("generate --model " + model);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--prompts FILE.jsonl is required"), std::string::npos) << r.out;
  r = run_cli("chat --model " + model + " --temperature hot");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--temperature: expected a number"), std::string::npos) << r.out;
  r = run_cli("chat --model " + model + " --backend cpu");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("no tokenizer.json"), std::string::npos) << r.out;
}

}  // namespace
