// Bad inputs through `deltatune train` / `deltatune info`: each ends with a non-zero exit and a message that names
// the file or field and what was expected, before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using testing_cli::CliResult;
using testing_cli::run_cli;

const fs::path kDemo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";
const fs::path kVisionImages = fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "vision" / "images";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class CliErrors : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::path(DT_BINARY_DIR) / "test_tmp" /
          ("cli_errors_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  // A one-step run of the bundled text-only demo model with `extra` YAML lines appended (a later key wins).
  std::string run_file(const std::string& extra, const std::string& dataset = "") {
    const fs::path path = dir / "run.yaml";
    std::ofstream(path) << "base_model: " << (kDemo / "model").string() << "\n"
                        << "datasets:\n  - path: "
                        << (dataset.empty() ? (kDemo / "data" / "demo_chat.jsonl").string() : dataset)
                        << "\n    type: chat\n"
                        << "sequence_len: 128\nmax_steps: 1\nbackend: auto\nval_set_size: 0\n"
                        << "output_dir: " << (dir / "out").string() << "\n"
                        << "dataset_prepared_path: " << (dir / "cache").string() << "\n"
                        << extra;
    return path.string();
  }
  CliResult train(const std::string& run, const std::string& more = "") {
    return run_cli("train " + run + " --db " + (dir / "db.sqlite").string() + " " + more);
  }
  // A failed start leaves no output folder behind.
  void expect_nothing_written() const { EXPECT_FALSE(fs::exists(dir / "out")) << "output folder written"; }
};

TEST_F(CliErrors, UnknownBaseQuantizationNamesFileFieldAndChoices) {
  const CliResult r = train(run_file("base_quantization: int4\n"));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "run.yaml:")) << r.out;
  EXPECT_TRUE(has(r.out, "base_quantization")) << r.out;
  EXPECT_TRUE(has(r.out, "'int4'")) << r.out;
  EXPECT_TRUE(has(r.out, "none, fp8, nf4")) << r.out;
  expect_nothing_written();
}

TEST_F(CliErrors, UnknownLoraGroupNamesTheEntryAndTheGroups) {
  const CliResult r = train(run_file("lora_target_groups: [attn, mlpp]\n"));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "run.yaml:")) << r.out;
  EXPECT_TRUE(has(r.out, "lora_target_groups[1]")) << r.out;
  EXPECT_TRUE(has(r.out, "'mlpp'")) << r.out;
  EXPECT_TRUE(has(r.out, "attn, linear_attn, mlp, shared_expert, experts, vision")) << r.out;
  expect_nothing_written();
}

TEST_F(CliErrors, VisionGroupOnATextOnlyCheckpointNamesTheCheckpoint) {
  const CliResult r = train(run_file("lora_target_groups: [attn, vision]\n"));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "base_model " + (kDemo / "model").string())) << r.out;
  EXPECT_TRUE(has(r.out, "lora_target_groups: group 'vision' needs a vision-language checkpoint")) << r.out;
  EXPECT_TRUE(has(r.out, "no vision_config")) << r.out;
  expect_nothing_written();
  // The memory estimate refuses it the same way.
  const CliResult info = run_cli("info --model " + (kDemo / "model").string() + " --vision-lora --no-gradient-checkpointing");
  EXPECT_NE(info.rc, 0) << info.out;
  EXPECT_TRUE(has(info.out, "--vision-lora")) << info.out;
  EXPECT_TRUE(has(info.out, "no vision_config")) << info.out;
}

TEST_F(CliErrors, ImageRowsForATextOnlyCheckpointNameFileAndRow) {
  const fs::path rows = dir / "rows.jsonl";
  {
    std::ofstream f(rows);
    f << R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}]})" << "\n";
    f << R"({"messages":[{"role":"user","content":[{"type":"image","image":")"
      << (kVisionImages / "rgb_36x40.png").string()
      << R"("},{"type":"text","text":"What is it?"}]},{"role":"assistant","content":"A red square."}]})" << "\n";
  }
  const CliResult r = train(run_file("", rows.string()));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, rows.string() + ":2:")) << r.out;
  EXPECT_TRUE(has(r.out, "the row has images, but the checkpoint is text-only")) << r.out;
  EXPECT_TRUE(has(r.out, "no vision_config")) << r.out;
}

// Without a usable GPU backend, `backend: cuda` says what to install for this build: a build without CUDA said
// "install the NVIDIA driver  or newer (CUDA 0.0)", naming no release and a CUDA that does not exist.
TEST_F(CliErrors, BackendCudaWithoutAGpuBackendSaysWhatThisBuildNeeds) {
  const CliResult r = train(run_file(""), "--backend cuda");
  if (r.rc == 0) GTEST_SKIP() << "this machine runs the GPU backend";
  EXPECT_TRUE(has(r.out, "backend cuda: ")) << r.out;
  EXPECT_FALSE(has(r.out, "CUDA 0.0")) << r.out;
  EXPECT_FALSE(has(r.out, "driver  or")) << r.out;
  EXPECT_TRUE(has(r.out, "the CPU backend works without it")) << r.out;
  const CliResult info = run_cli("info --json");
  if (has(info.out, "\"cuda_built\":false")) {
    EXPECT_TRUE(has(r.out, "this build of DeltaTune has no GPU backend")) << r.out;
    EXPECT_TRUE(has(r.out, "-DDT_CUDA=ON")) << r.out;
  }
  expect_nothing_written();
}

// GPU 999 exists on no machine this runs on; without any GPU, GPU 0 is the first missing one.
TEST_F(CliErrors, GpusThatDoNotExistAreNamed) {
  const CliResult r = train(run_file(""), "--gpus 0,999");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--gpus 0,999: GPU ")) << r.out;
  EXPECT_TRUE(has(r.out, "does not exist: this machine shows")) << r.out;
  EXPECT_TRUE(has(r.out, "backend: cpu")) << r.out;
  expect_nothing_written();
  // The same list in the run file names the file and its field.
  const std::string run = run_file("gpus: [0, 999]\n");
  const CliResult f = train(run);
  EXPECT_NE(f.rc, 0) << f.out;
  EXPECT_TRUE(has(f.out, run + ": gpus: GPU ")) << f.out;
  expect_nothing_written();
}

// Command-line overrides are checked like the run file's fields: the option, the value and what is expected,
// before the model or the data are read.
TEST_F(CliErrors, BadMaxStepsOptionNamesTheOptionAndTheRange) {
  for (const std::string bad : {"x", "-5", "0", "3.5"}) {
    const CliResult r = train(run_file(""), "--max-steps " + bad);
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_TRUE(has(r.out, "option --max-steps expects an integer >= 1, or -1 for no limit, got '" + bad + "'"))
        << r.out;
    EXPECT_FALSE(has(r.out, "internal error")) << r.out;
    expect_nothing_written();
  }
}

TEST_F(CliErrors, UnknownBackendOptionNamesTheChoices) {
  const CliResult r = train(run_file(""), "--backend tpu");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "option --backend expects auto, cpu or cuda, got 'tpu'")) << r.out;
  EXPECT_FALSE(has(r.out, "trainable LoRA parameters")) << "checked only after the model was read:\n" << r.out;
  expect_nothing_written();
  const CliResult e = run_cli("eval --model " + (kDemo / "model").string() + " --data " +
                              (kDemo / "data" / "demo_chat.jsonl").string() + " --backend tpu");
  EXPECT_NE(e.rc, 0) << e.out;
  EXPECT_TRUE(has(e.out, "option --backend expects auto, cpu or cuda, got 'tpu'")) << e.out;
}

TEST_F(CliErrors, EvalSeqLenMustBeAPositiveInteger) {
  const CliResult r = run_cli("eval --model " + (kDemo / "model").string() + " --data " +
                              (kDemo / "data" / "demo_chat.jsonl").string() + " --seq-len 12x");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "option --seq-len expects an integer >= 1, got '12x'")) << r.out;
}

TEST_F(CliErrors, InfoNamesAnUnexpectedArgument) {
  const CliResult r = run_cli("info " + (kDemo / "model").string());
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "unexpected argument '" + (kDemo / "model").string() + "' (a checkpoint goes after --model)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "usage: deltatune info")) << r.out;
}

TEST_F(CliErrors, ExportOfAFolderThatIsNoAdapterSaysWhatAnAdapterFolderHolds) {
  const std::string out = (dir / "export").string();
  const CliResult model = run_cli("export --adapter " + (kDemo / "model").string() + " --out " + out);
  EXPECT_NE(model.rc, 0) << model.out;
  EXPECT_TRUE(has(model.out, "--adapter " + (kDemo / "model").string() + ": no adapter_config.json (expected a PEFT "
                             "adapter folder: adapter_config.json and adapter_model.safetensors"))
      << model.out;
  const CliResult missing = run_cli("export --adapter " + (dir / "nope").string() + " --out " + out);
  EXPECT_NE(missing.rc, 0) << missing.out;
  EXPECT_TRUE(has(missing.out, "--adapter " + (dir / "nope").string() + ": no such folder")) << missing.out;
  EXPECT_FALSE(fs::exists(out)) << "export folder written";
}

}  // namespace
}  // namespace deltatune
