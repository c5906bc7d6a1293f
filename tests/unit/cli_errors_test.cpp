// Bad inputs through `deltatune train` / `info` / `export`: each ends with a non-zero exit and a message that names
// the file or field and what was expected, before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "deltatune/trainer.h"

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

// The multi-GPU estimate's options: a bad --gpu-memory named only "memory size '1.5.GB'", and --gpus all on a
// machine without GPUs asked for "--gpus with GPUs present".
TEST_F(CliErrors, InfoGpuOptionsNameTheOptionAndWhatIsExpected) {
  const std::string model = " --model " + (kDemo / "model").string();
  const CliResult mem = run_cli("info" + model + " --gpu-count 2 --gpu-memory 1.5.GB");
  EXPECT_NE(mem.rc, 0) << mem.out;
  EXPECT_TRUE(has(mem.out, "option --gpu-memory: memory size '1.5.GB': expected a number with an optional unit"))
      << mem.out;
  // A bare number is bytes to the size parser: for a GPU that is a missing unit, said as such.
  const CliResult bare = run_cli("info" + model + " --gpu-count 2 --gpu-memory 80");
  EXPECT_NE(bare.rc, 0) << bare.out;
  EXPECT_TRUE(has(bare.out, "option --gpu-memory '80' is 80 bytes, less than 1 GiB: give the unit, e.g. --gpu-memory "
                            "80GiB (or 80GB)"))
      << bare.out;
  const CliResult group = run_cli("info" + model + " --lora-groups attn,experts");
  EXPECT_NE(group.rc, 0) << group.out;
  EXPECT_TRUE(has(group.out, "--lora-groups: 'experts' is not a LoRA group of " + (kDemo / "model").string() +
                                 " (it has: "))
      << group.out;
  const CliResult bad = run_cli("info" + model + " --gpus 1-3");
  EXPECT_NE(bad.rc, 0) << bad.out;
  EXPECT_TRUE(has(bad.out, "--gpus '1-3' is not valid (expected GPU indices like 0,1 or 'all')")) << bad.out;
  const CliResult all = run_cli("info" + model + " --gpus all");
  if (all.rc == 0) GTEST_SKIP() << "this machine has GPUs";
  EXPECT_TRUE(has(all.out, "--gpus all: this machine shows no CUDA GPU; state the GPUs with --gpu-count N "
                           "--gpu-memory 80GiB"))
      << all.out;
  const CliResult stated = run_cli("info" + model + " --gpus all --gpu-count 2 --gpu-memory 80GiB");
  EXPECT_EQ(stated.rc, 0) << stated.out;
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

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The id in "run <id> done; output in ...".
std::string finished_run_id(const std::string& out) {
  const size_t at = out.rfind("run ");
  return at == std::string::npos ? "" : out.substr(at + 4, out.find(' ', at + 4) - at - 4);
}

// A second run with the same output_dir replaced the first run's adapter and, at its first checkpoint,
// deleted the first run's later checkpoints (an "abandoned timeline" to the pruning). Now it is refused,
// naming the folder, what is in it and whose it is, before anything is written; the demo takes the next free
// folder.
TEST_F(CliErrors, NewRunIntoAFolderHoldingAnotherRunsOutputIsRefused) {
  const std::string run = run_file("save_steps: 1\n");
  const CliResult first = train(run);
  ASSERT_EQ(first.rc, 0) << first.out;
  const std::string id = finished_run_id(first.out);
  const fs::path adapter = dir / "out" / "adapter_model.safetensors";
  const std::string before = bytes_of(adapter),
                    ckpt = bytes_of(dir / "out" / "checkpoint-1" / "optimizer.safetensors");
  ASSERT_FALSE(before.empty());
  const CliResult again = train(run_file("save_steps: 1\nlearning_rate: 0.01\n"));
  EXPECT_NE(again.rc, 0) << again.out;
  EXPECT_TRUE(has(again.out, "output_dir " + (dir / "out").string() + " already holds the output of run " +
                                 id + ", finished (adapter_model.safetensors, checkpoint-1)"))
      << again.out;
  EXPECT_TRUE(has(again.out, "choose another output_dir or remove the folder")) << again.out;
  EXPECT_FALSE(has(again.out, "trainable LoRA parameters")) << "refused only after the model was read:\n"
                                                            << again.out;
  EXPECT_EQ(bytes_of(adapter), before);
  EXPECT_EQ(bytes_of(dir / "out" / "checkpoint-1" / "optimizer.safetensors"), ckpt);
  // Another output_dir trains.
  const CliResult other = train(run, "--output-dir " + (dir / "out-2").string());
  EXPECT_EQ(other.rc, 0) << other.out;
  // Folders the demo would take: runs/demo while it holds no run's output, then runs/demo-2.
  EXPECT_EQ(output_dir_unused((dir / "nothing").string()), (dir / "nothing").string());
  EXPECT_EQ(output_dir_unused((dir / "out").string()), (dir / "out-3").string());
}

// A PEFT export into a training checkpoint or a run's output folder moved its adapter in beside that run's
// optimizer state and checkpoints (a checkpoint that would resume with another run's weights). Refused,
// naming the folder and the run files in it; an export into a folder of other files still works.
TEST_F(CliErrors, ExportIntoACheckpointOrARunsFolderIsRefused) {
  const std::string run = run_file("save_steps: 1\n");
  const CliResult first = train(run);
  ASSERT_EQ(first.rc, 0) << first.out;
  const CliResult second =
      train(run_file("save_steps: 1\nlearning_rate: 0.01\n"), "--output-dir " + (dir / "second").string());
  ASSERT_EQ(second.rc, 0) << second.out;
  const std::string id = finished_run_id(second.out);
  const std::string db = " --db " + (dir / "db.sqlite").string();
  const fs::path ckpt = dir / "out" / "checkpoint-1";
  const std::string before = bytes_of(ckpt / "adapter_model.safetensors"),
                    final = bytes_of(dir / "out" / "adapter_model.safetensors");

  const CliResult into_ckpt = run_cli("export " + id + db + " --out " + ckpt.string());
  EXPECT_NE(into_ckpt.rc, 0) << into_ckpt.out;
  EXPECT_TRUE(
      has(into_ckpt.out, "export: --out " + ckpt.string() +
                             " holds a training run's files (trainer_state.json, optimizer.safetensors)"))
      << into_ckpt.out;
  const CliResult into_run = run_cli("export " + id + db + " --out " + (dir / "out").string());
  EXPECT_NE(into_run.rc, 0) << into_run.out;
  EXPECT_TRUE(has(into_run.out,
                  "export: --out " + (dir / "out").string() + " holds a training run's files (checkpoint-1)"))
      << into_run.out;
  EXPECT_EQ(bytes_of(ckpt / "adapter_model.safetensors"), before);
  EXPECT_EQ(bytes_of(dir / "out" / "adapter_model.safetensors"), final);

  const CliResult onto_itself = run_cli("export " + id + db + " --out " + (dir / "second").string());
  EXPECT_NE(onto_itself.rc, 0) << onto_itself.out;
  EXPECT_TRUE(has(onto_itself.out,
                  "export: --out " + (dir / "second").string() + " is the adapter folder the export reads"))
      << onto_itself.out;

  fs::create_directories(dir / "notes");
  std::ofstream(dir / "notes" / "mine.txt") << "kept\n";
  const CliResult into_notes = run_cli("export " + id + db + " --out " + (dir / "notes").string());
  EXPECT_EQ(into_notes.rc, 0) << into_notes.out;
  EXPECT_EQ(bytes_of(dir / "notes" / "adapter_model.safetensors"),
            bytes_of(dir / "second" / "adapter_model.safetensors"));
  EXPECT_EQ(bytes_of(dir / "notes" / "mine.txt"), "kept\n");
}

}  // namespace
}  // namespace deltatune
