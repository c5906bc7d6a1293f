// Run YAML parsing, validation, canonical output and path resolution.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "deltatune/loss_logits.h"
#include "deltatune/run_config.h"

namespace fs = std::filesystem;
using deltatune::DatasetSpec;
using deltatune::Error;
using deltatune::run_config_from_yaml_file;
using deltatune::run_config_from_yaml_string;
using deltatune::run_config_to_yaml;
using deltatune::RunConfig;

namespace {

// The message of the Error that parsing `yaml` throws ("" when it parses).
std::string parse_error(const std::string& yaml) {
  try {
    run_config_from_yaml_string(yaml);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dt_runs_config_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Every field differs from its default, so a key the writer or parser forgets shows up in ==.
RunConfig filled_config() {
  RunConfig c;
  c.base_model = "/models/Qwen3.5-0.8B";
  c.model_class = "causal_lm";
  c.datasets = {
      {"data/a.jsonl", "chat", ""}, {"data/b.jsonl", "", "validation"}, {"c d.jsonl", "alpaca", "train"}};
  c.test_datasets = {{"data/test.jsonl", "pretokenized", ""}};
  c.sample_prompts = {R"([{"role":"user","content":"What is 2+2?"}])",
                      R"([{"role":"system","content":"Be brief: \"yes\" or no"},{"role":"user","content":"null"}])"};
  c.sample_max_new_tokens = 17;
  c.val_set_size = 0.05;
  c.sequence_len = 4096;
  c.sample_packing = true;
  c.train_on_inputs = true;
  c.enable_thinking = "false";
  c.skip_bad_rows = true;
  c.truncation = "drop";
  c.dataset_prepared_path = "cache: with colon";
  c.lora_r = 8;
  c.lora_alpha = 16.5;
  c.lora_dropout = 0.1;
  c.use_rslora = true;
  c.lora_target_groups = {"attn", "linear_attn", "mlp", "shared_expert", "experts"};
  c.lora_target_modules = {"q_proj", "v_proj"};
  c.lora_target_parameters = {"mlp.experts.gate_up_proj"};
  c.lora_model_dir = "null";  // must not come back as the null default
  c.micro_batch_size = 4;
  c.gradient_accumulation_steps = 8;
  c.num_epochs = 2.5;
  c.max_steps = 100;
  c.learning_rate = 1e-4 / 3;  // not a short decimal: checks the exact round trip of doubles
  c.lr_scheduler = "linear";
  c.warmup_steps = 10;
  c.optimizer = "sgd";
  c.adam_beta1 = 0.8;
  c.adam_beta2 = 0.95;
  c.adam_epsilon = 1e-6;
  c.weight_decay = 0.01;
  c.max_grad_norm = -1;
  c.seed = 1234;
  c.backend = "cuda";
  c.gpu = 1;
  c.kernels = "portable";
  c.base_quantization = "fp8";
  c.weight_layout = "sharded";
  c.fused_loss = false;
  c.loss_logits = "bf16";
  c.gradient_checkpointing_auto = false;
  c.gradient_checkpointing = true;
  c.gradient_checkpointing_layers = 7;
  c.activation_offload = false;
  c.nan_policy = "skip";
  c.output_dir = "out/run1";
  c.run_name = "yes";  // a YAML 1.1 boolean word, must stay a string
  c.logging_steps = 5;
  c.eval_steps = 50;
  c.save_steps = 25;
  c.save_total_limit = 0;
  c.resume_from_checkpoint = "latest";
  c.tags = {"baseline", "# not a comment"};
  return c;
}

}  // namespace

TEST(RunsConfig, ParsesAxolotlStyleFile) {
  const RunConfig c = run_config_from_yaml_string(R"(
base_model: /models/qwen
datasets:
  - path: train.jsonl
    type: chat
  - path: val.jsonl
    split: validation
  - plain.jsonl
val_set_size: 0.1
sequence_len: 1024
sample_packing: true
adapter: lora
lora_r: 32
lora_alpha: 64
lora_dropout: 0.05
lora_target_modules: all-linear
lora_target_groups: [attn, mlp]
micro_batch_size: 2
gradient_accumulation_steps: 4
num_epochs: 3
learning_rate: 2e-5
lr_scheduler: linear
warmup_ratio: 0.1
optimizer: adamw_torch
weight_decay: 0.0
max_grad_norm: 1.0
seed: 7
output_dir: ./outputs/lora
lora_model_dir:
resume_from_checkpoint:
)");
  EXPECT_EQ(c.base_model, "/models/qwen");
  ASSERT_EQ(c.datasets.size(), 3u);
  EXPECT_EQ(c.datasets[0], (DatasetSpec{"train.jsonl", "chat", ""}));
  EXPECT_EQ(c.datasets[1], (DatasetSpec{"val.jsonl", "", "validation"}));
  EXPECT_EQ(c.datasets[2], (DatasetSpec{"plain.jsonl", "", ""}));
  EXPECT_DOUBLE_EQ(c.val_set_size, 0.1);
  EXPECT_EQ(c.sequence_len, 1024);
  EXPECT_TRUE(c.sample_packing);
  EXPECT_EQ(c.lora_r, 32);
  EXPECT_DOUBLE_EQ(c.lora_alpha, 64);
  EXPECT_DOUBLE_EQ(c.lora_dropout, 0.05);
  EXPECT_EQ(c.lora_target_modules, std::vector<std::string>{"all-linear"});  // a string is a one-item list
  EXPECT_EQ(c.lora_target_groups, (std::vector<std::string>{"attn", "mlp"}));
  EXPECT_EQ(c.micro_batch_size, 2);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(c.num_epochs, 3);
  EXPECT_DOUBLE_EQ(c.learning_rate, 2e-5);
  EXPECT_EQ(c.lr_scheduler, "linear");
  EXPECT_DOUBLE_EQ(c.warmup_ratio, 0.1);
  EXPECT_EQ(c.seed, 7);
  EXPECT_EQ(c.output_dir, "./outputs/lora");
  // `key:` with no value keeps the default.
  EXPECT_EQ(c.lora_model_dir, "");
  EXPECT_EQ(c.max_steps, -1);
  EXPECT_EQ(c.optimizer, "adamw_torch");
}

TEST(RunsConfig, EmptyFileGivesDefaults) {
  EXPECT_EQ(run_config_from_yaml_string(""), RunConfig{});
  EXPECT_EQ(run_config_from_yaml_string("# only a comment\n"), RunConfig{});
}

TEST(RunsConfig, CanonicalYamlRoundTrips) {
  for (const RunConfig& c : {RunConfig{}, filled_config()}) {
    const std::string yaml = run_config_to_yaml(c);
    EXPECT_EQ(run_config_from_yaml_string(yaml), c) << yaml;
    EXPECT_EQ(run_config_to_yaml(run_config_from_yaml_string(yaml)), yaml);
  }
}

TEST(RunsConfig, CanonicalYamlHasEveryKeyInOrder) {
  const YAML::Node root = YAML::Load(run_config_to_yaml(RunConfig{}));
  std::vector<std::string> keys;
  for (const auto& kv : root) keys.push_back(kv.first.Scalar());
  EXPECT_EQ(keys, deltatune::run_config_keys());
  EXPECT_EQ(keys.size(), 58u);
}

TEST(RunsConfig, UnknownKeySuggestsClosest) {
  EXPECT_EQ(parse_error("base_model: m\nlerning_rate: 1e-4\n"),
            "run.yaml:2: unknown key 'lerning_rate' (did you mean 'learning_rate'?)");
  EXPECT_NE(parse_error("lora_targte_modules: [q_proj]").find("did you mean 'lora_target_modules'?"),
            std::string::npos);
  // Far from every key: no guess, the valid keys instead.
  const std::string far = parse_error("flash_attention: true");
  EXPECT_NE(far.find("unknown key 'flash_attention' (valid keys: base_model,"), std::string::npos) << far;
}

TEST(RunsConfig, BadValuesNameKeyValueAndExpectation) {
  EXPECT_EQ(parse_error("learning_rate: -0.001"),
            "run.yaml:1: learning_rate: '-0.001' is not valid (expected a number > 0)");
  EXPECT_EQ(parse_error("lora_r: 0"), "run.yaml:1: lora_r: '0' is not valid (expected an integer >= 1)");
  EXPECT_NE(parse_error("enable_thinking: maybe").find("enable_thinking: 'maybe' is not valid (expected one of"),
            std::string::npos)
      << parse_error("enable_thinking: maybe");
  EXPECT_EQ(parse_error("lora_r: 8.5"), "run.yaml:1: lora_r: '8.5' is not valid (expected an integer >= 1)");
  EXPECT_EQ(parse_error("gradient_checkpointing_layers: -2"),
            "run.yaml:1: gradient_checkpointing_layers: '-2' is not valid (expected an integer >= 0 (layers "
            "checkpointed, from the first), or -1 for all)");
  EXPECT_EQ(
      parse_error("lr_scheduler: cosin"),
      "run.yaml:1: lr_scheduler: 'cosin' is not valid (expected one of constant, linear, cosine; did you "
      "mean 'cosine'?)");
  EXPECT_NE(parse_error("optimizer: adam8bit")
                .find("optimizer: 'adam8bit' is not valid (expected one of "
                      "adamw_torch, adamw, sgd"),
            std::string::npos);
  EXPECT_EQ(
      parse_error("lora_target_groups: [attn, atn_linear, mlp]"),
      "run.yaml:1: lora_target_groups[1]: 'atn_linear' is not valid (expected one of attn, linear_attn, mlp, "
      "shared_expert, experts, vision)");
  EXPECT_NE(parse_error("sample_packing: maybe")
                .find("sample_packing: 'maybe' is not valid (expected true or false)"),
            std::string::npos);
  EXPECT_EQ(parse_error("activation_offload: auto"),
            "run.yaml:1: activation_offload: 'auto' is not valid (expected true or false)");
  EXPECT_FALSE(run_config_from_yaml_string("activation_offload: false").activation_offload);
  EXPECT_TRUE(RunConfig{}.activation_offload);
  EXPECT_NE(parse_error("adapter: qlora").find("adapter: 'qlora' is not valid (expected one of lora"),
            std::string::npos);
  EXPECT_NE(parse_error("sequence_len: [1, 2]").find("sequence_len: '[1, 2]' is not valid"),
            std::string::npos);
  EXPECT_NE(parse_error("learning_rate: .nan").find("learning_rate: '.nan' is not valid"), std::string::npos);
  EXPECT_NE(parse_error("val_set_size: 1.5").find("expected a fraction in [0, 1)"), std::string::npos);
  EXPECT_NE(parse_error("max_steps: 0").find("expected an integer >= 1, or -1 for no limit"),
            std::string::npos);
  EXPECT_EQ(parse_error("kernels: hopper"),
            "run.yaml:1: kernels: 'hopper' is not valid (expected one of auto, portable)");
  EXPECT_NE(parse_error("gpu: 99999999999").find("gpu: '99999999999' is not valid"), std::string::npos);
  EXPECT_NE(
      parse_error("output_dir: \"\"").find("output_dir: '\"\"' is not valid (expected a non-empty string)"),
      std::string::npos);
  EXPECT_NE(parse_error("warmup_steps: 5\nwarmup_ratio: 0.1").find("both set"), std::string::npos);
  // Found by fuzz_run_yaml: invalid UTF-8 would not survive the canonical writer.
  const std::string bad_utf8 = "datasets:\n  - p\x04" "ath se\x9a" "q\n";
  EXPECT_NE(parse_error(bad_utf8).find("datasets[0]: 'p\x04" "ath se\xef\xbf\xbd" "q' is not valid (expected valid "
                                       "UTF-8 text)"),
            std::string::npos)
      << parse_error(bad_utf8);
  EXPECT_NE(parse_error("run_name: \"\xff\"").find("expected valid UTF-8 text"), std::string::npos);
  EXPECT_EQ(run_config_from_yaml_string("run_name: \"\x04 \xc3\xa9\"").run_name, "\x04 \xc3\xa9");
}

// loss_logits: fp32 (the default; also for a stored run written before the key existed, so its resume keeps fp32
// logits) or bf16; the canonical YAML (what a run stores, and what a resume parses) keeps it.
TEST(RunsConfig, LossLogits) {
  EXPECT_EQ(RunConfig{}.loss_logits, "fp32");
  EXPECT_EQ(run_config_from_yaml_string("base_model: m\n").loss_logits, "fp32");
  EXPECT_EQ(run_config_from_yaml_string("loss_logits: bf16\n").loss_logits, "bf16");
  EXPECT_EQ(run_config_from_yaml_string("loss_logits: fp32\n").loss_logits, "fp32");
  EXPECT_EQ(run_config_from_yaml_string("loss_logits:\n").loss_logits, "fp32");
  RunConfig c;
  c.loss_logits = "bf16";
  const std::string yaml = run_config_to_yaml(c);
  EXPECT_NE(yaml.find("\nloss_logits: bf16\n"), std::string::npos) << yaml;
  EXPECT_EQ(run_config_from_yaml_string(yaml).loss_logits, "bf16");
  EXPECT_NE(deltatune::run_config_hash(c), deltatune::run_config_hash(RunConfig{}));
  const std::string e = parse_error("base_model: m\nloss_logits: fp16\n");
  EXPECT_EQ(e.rfind("run.yaml:2: loss_logits: 'fp16' is not valid (expected one of fp32, bf16", 0), 0u) << e;
  EXPECT_NE(parse_error("loss_logits: BF16").find("loss_logits: 'BF16' is not valid (expected one of fp32, bf16"),
            std::string::npos);
  EXPECT_NE(parse_error("loss_logits: true").find("loss_logits: 'true' is not valid"), std::string::npos);
  c.loss_logits = "half";
  try {
    deltatune::run_config_validate(c);
    FAIL() << "loss_logits: half validated";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("run config: loss_logits: 'half' is not valid (expected one of fp32, bf16"),
              std::string::npos)
        << err.what();
  }
  EXPECT_EQ(deltatune::loss_logits_from_name("bf16", "x"), deltatune::LossLogits::BF16);
  EXPECT_EQ(deltatune::loss_logits_from_name("fp32", "x"), deltatune::LossLogits::F32);
  try {
    deltatune::loss_logits_from_name("f32", "option --loss-logits");
    FAIL() << "f32 accepted";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "option --loss-logits: 'f32' is not valid (expected one of fp32, bf16)");
  }
  EXPECT_STREQ(deltatune::loss_logits_name(deltatune::LossLogits::BF16), "bf16");
}

TEST(RunsConfig, BadDatasetEntries) {
  EXPECT_EQ(parse_error("datasets:\n  - path: a.jsonl\n    typ: chat\n"),
            "run.yaml:2: datasets[0]: 'typ' is not valid (expected keys path, type, split only (unknown key "
            "'typ'; did you mean 'type'?))");
  EXPECT_NE(parse_error("datasets:\n  - type: chat\n").find("expected a 'path' key"), std::string::npos);
  EXPECT_NE(parse_error("datasets:\n  - path: a\n    type: chatml\n")
                .find("datasets[0].type: 'chatml' is not valid (expected one of \"\", chat,"),
            std::string::npos);
  EXPECT_NE(
      parse_error("test_datasets:\n  - path: a\n    split: dev\n").find("test_datasets[0].split: 'dev'"),
      std::string::npos);
}

// `type: messages` (the dataset reader's alias for rows with a `messages` list) is accepted and stored as
// chat, so the run file, the studio's type box and the reader agree (fuzz finding: the reader took it, the
// run file refused it).
TEST(RunsConfig, DatasetTypeMessagesIsChat) {
  const auto cfg = run_config_from_yaml_string("datasets:\n  - path: a.jsonl\n    type: messages\n");
  ASSERT_EQ(cfg.datasets.size(), 1u);
  EXPECT_EQ(cfg.datasets[0].type, "chat");
}

TEST(RunsConfig, StructuralErrors) {
  EXPECT_EQ(parse_error("seed: 1\nseed: 2\n"), "run.yaml:2: key 'seed' appears twice");
  EXPECT_NE(parse_error("seed: [1\n").find("run.yaml:"), std::string::npos);
  EXPECT_NE(parse_error("seed: [1\n").find("not valid YAML"), std::string::npos);
  EXPECT_NE(parse_error("- a\n- b\n").find("expected a mapping of run keys"), std::string::npos);
  try {
    run_config_from_yaml_file("/nonexistent/run.yaml");
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run.yaml"), std::string::npos);
  }
}

TEST(RunsConfig, RelativePathsResolveAgainstTheYamlFolder) {
  TempDir tmp;
  fs::create_directories(tmp.path / "model");
  fs::create_directories(tmp.path / "adapters/a1");
  fs::create_directories(tmp.path / "runs");
  std::ofstream(tmp.path / "train.jsonl") << "{}\n";
  const fs::path yaml = tmp.path / "run.yaml";
  std::ofstream(yaml) << "base_model: model\n"
                         "datasets:\n  - path: train.jsonl\n  - path: elsewhere.jsonl\n"
                         "lora_model_dir: adapters/a1\n"
                         "output_dir: runs/new_run\n"
                         "dataset_prepared_path: nowhere/cache\n"
                         "resume_from_checkpoint: latest\n";
  const RunConfig c = run_config_from_yaml_file(yaml.string());
  EXPECT_EQ(c.base_model, (tmp.path / "model").string());
  EXPECT_EQ(c.datasets[0].path, (tmp.path / "train.jsonl").string());
  EXPECT_EQ(c.datasets[1].path, "elsewhere.jsonl");  // not there: kept relative to the working directory
  EXPECT_EQ(c.lora_model_dir, (tmp.path / "adapters/a1").string());
  EXPECT_EQ(c.output_dir, (tmp.path / "runs/new_run").string());  // outputs: always next to the YAML
  EXPECT_EQ(c.dataset_prepared_path, (tmp.path / "nowhere/cache").string());
  EXPECT_EQ(c.resume_from_checkpoint, "latest");
  // Strings parsed with the default base_dir are left alone.
  EXPECT_EQ(run_config_from_yaml_string("base_model: model\n").base_model, "model");
}

TEST(RunsConfig, ValidateChecksValuesAndRequiredKeys) {
  RunConfig c = filled_config();
  EXPECT_NO_THROW(deltatune::run_config_validate(c));
  c.lora_r = 0;
  EXPECT_THROW(deltatune::run_config_validate(c), Error);
  c = filled_config();
  c.base_model.clear();
  try {
    deltatune::run_config_validate(c);
    FAIL() << "no error without base_model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("base_model"), std::string::npos);
  }
  c = filled_config();
  c.lora_target_groups.push_back("embed");
  EXPECT_THROW(deltatune::run_config_validate(c), Error);
}

TEST(RunsConfig, ItemsAndHash) {
  const RunConfig a = filled_config();
  RunConfig b = a;
  const auto items = deltatune::run_config_items(a);
  ASSERT_EQ(items.size(), deltatune::run_config_keys().size());
  EXPECT_EQ(items[0].first, "base_model");
  for (const auto& [k, v] : items) {
    if (k == "lora_target_groups") EXPECT_EQ(v, "[attn, linear_attn, mlp, shared_expert, experts]");
    if (k == "lora_r") EXPECT_EQ(v, "8");
    if (k == "lora_alpha") EXPECT_EQ(v, "16.5");
    EXPECT_EQ(v.find('\n'), std::string::npos) << k << " is not one line: " << v;
  }
  EXPECT_EQ(deltatune::run_config_hash(a), deltatune::run_config_hash(b));
  EXPECT_EQ(deltatune::run_config_hash(a).size(), 16u);
  b.learning_rate *= 2;
  EXPECT_NE(deltatune::run_config_hash(a), deltatune::run_config_hash(b));
}

// The run files shipped with the studio must parse (they are written by hand, so typos are possible).
TEST(RunsConfig, ShippedRunFilesParse) {
  const fs::path resources = fs::path(DT_SOURCE_DIR) / "resources";
  if (!fs::exists(resources)) GTEST_SKIP() << "no resources folder";
  int parsed = 0;
  for (const auto& e : fs::recursive_directory_iterator(resources)) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(run_config_from_yaml_file(e.path().string())) << e.path();
    ++parsed;
  }
  EXPECT_GT(parsed, 0);
}
