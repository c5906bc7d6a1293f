// README.md is the front door: it starts with the two commands CI relies on (setup + demo, build + tests),
// .ci/run still runs the README's test command, and its complete run file example is a valid run file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "deltatune/run_config.h"
#include "io/files.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DT_SOURCE_DIR;

std::string read_all(const fs::path& p) { return deltatune::read_text_file(p.string()); }

// The body of the first ```<lang> block at or after `from`, or "".
std::string code_block(const std::string& text, const std::string& lang, size_t from = 0) {
  const std::string open = "```" + lang + "\n";
  const size_t a = text.find(open, from);
  if (a == std::string::npos) return {};
  const size_t b = text.find("\n```", a + open.size());
  return b == std::string::npos ? std::string() : text.substr(a + open.size(), b - a - open.size() + 1);
}

}  // namespace

TEST(Readme, StartsWithTheSetupAndTestCommandsThatCiRuns) {
  const std::string readme = read_all(kRoot / "README.md");
  const std::string first = code_block(readme, "bash");
  ASSERT_FALSE(first.empty()) << "README.md has no ```bash block";
  EXPECT_LT(readme.find("```bash"), readme.find("\n## ")) << "the commands come before the first section";
  EXPECT_NE(first.find("bash scripts/setup.sh && bash scripts/build.sh && bash scripts/run.sh"), std::string::npos)
      << first;
  const std::string test_cmd = "bash scripts/setup.sh && bash scripts/test.sh";
  EXPECT_NE(first.find(test_cmd), std::string::npos) << first;
  const std::string ci = read_all(kRoot / ".ci/run");
  EXPECT_NE(ci.find("bash scripts/setup.sh\nbash scripts/test.sh\n"), std::string::npos)
      << ".ci/run no longer runs README's test command (" << test_cmd << "):\n" << ci;
  for (const char* script : {"scripts/setup.sh", "scripts/build.sh", "scripts/run.sh", "scripts/test.sh"})
    EXPECT_TRUE(fs::exists(kRoot / script)) << script;
}

TEST(Readme, TheCompleteRunFileExampleIsAValidRunFile) {
  const std::string readme = read_all(kRoot / "README.md");
  const std::string yaml = code_block(readme, "yaml", readme.find("## The command line"));
  ASSERT_FALSE(yaml.empty()) << "no ```yaml block under \"## The command line\"";
  deltatune::RunConfig cfg;
  try {
    cfg = deltatune::run_config_from_yaml_string(yaml, "/nonexistent/runs");
  } catch (const deltatune::Error& e) {
    FAIL() << "README's run file example does not parse: " << e.what();
  }
  EXPECT_FALSE(cfg.base_model.empty());
  EXPECT_GE(cfg.datasets.size(), 1u);
  EXPECT_FALSE(cfg.output_dir.empty());
  // The keys README shows take effect (not defaults): a few that differ from the defaults.
  const deltatune::RunConfig defaults;
  EXPECT_NE(cfg.sequence_len, defaults.sequence_len);
  EXPECT_NE(cfg.gradient_accumulation_steps, defaults.gradient_accumulation_steps);
  EXPECT_NE(cfg.sample_packing, defaults.sample_packing);
}
