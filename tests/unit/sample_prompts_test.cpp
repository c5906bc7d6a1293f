// The run config's sample_prompts: the key's forms, and generation during training on the demo model (CPU):
// every eval step and the last step store one greedy answer per prompt, and the last step's answers equal what
// the Generator answers with the adapter the run wrote.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/generate.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"
#include "error_text.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kDemo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";

TEST(SamplePrompts, ConfigForms) {
  const RunConfig c = run_config_from_yaml_string(R"(
sample_prompts:
  - What is 2 plus 2?
  - - {role: system, content: Be brief.}
    - {role: user, content: "Hi: \"there\""}
  - messages: [{role: user, content: Third}]
sample_max_new_tokens: 9
)");
  ASSERT_EQ(c.sample_prompts.size(), 3u);
  EXPECT_EQ(c.sample_prompts[0], R"([{"role":"user","content":"What is 2 plus 2?"}])");
  EXPECT_EQ(c.sample_prompts[1],
            R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi: \"there\""}])");
  EXPECT_EQ(c.sample_prompts[2], R"([{"role":"user","content":"Third"}])");
  EXPECT_EQ(c.sample_max_new_tokens, 9);
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(c)), c);

  const fs::path dir = fs::temp_directory_path() / ("dt_sample_prompts_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "prompts.jsonl") << R"({"messages": [{"role": "user", "content": "a"}]})" << "\n";
  std::ofstream(dir / "run.yaml") << "sample_prompts: prompts.jsonl\n";
  const RunConfig f = run_config_from_yaml_file((dir / "run.yaml").string());
  EXPECT_TRUE(f.sample_prompts.empty());
  EXPECT_EQ(fs::path(f.sample_prompts_file), dir / "prompts.jsonl");  // resolved against the run file's folder
  EXPECT_EQ(run_config_from_yaml_string(run_config_to_yaml(f)), f);
  fs::remove_all(dir);

  const std::string bad_role =
      error_of([] { run_config_from_yaml_string("sample_prompts: [[{role: robot, content: x}]]"); });
  EXPECT_NE(bad_role.find("sample_prompts[0][0].role"), std::string::npos) << bad_role;
  EXPECT_NE(bad_role.find("robot"), std::string::npos) << bad_role;
  const std::string bad_message =
      error_of([] { run_config_from_yaml_string("sample_prompts: [[{role: user, text: x}]]"); });
  EXPECT_NE(bad_message.find("sample_prompts[0][0]"), std::string::npos) << bad_message;
  EXPECT_NE(bad_message.find("{role, content}"), std::string::npos) << bad_message;
  EXPECT_NE(error_of([] { run_config_from_yaml_string("sample_max_new_tokens: 0"); }).find("sample_max_new_tokens"),
            std::string::npos);
}

RunConfig demo_config(const fs::path& out) {
  RunConfig cfg = run_config_from_yaml_file((kDemo / "demo_run.yaml").string());
  cfg.output_dir = (out / "run").string();
  cfg.dataset_prepared_path = (out / "cache").string();
  cfg.backend = "cpu";
  cfg.val_set_size = 0;  // samples come at eval steps with or without an eval set
  cfg.save_steps = 0;
  cfg.max_steps = 5;
  cfg.eval_steps = 2;
  cfg.learning_rate = 1e-2;
  cfg.sample_max_new_tokens = 12;
  return cfg;
}

struct Quiet : RunObserver {};

TEST(SamplePrompts, GeneratedAtEvalStepsWithTheAdapterBeingTrained) {
  const fs::path dir = fs::temp_directory_path() / ("dt_sample_train_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig cfg = demo_config(dir);
  ASSERT_EQ(cfg.sample_prompts.size(), 2u) << "the demo config names two sample prompts";
  Quiet obs;
  RunControl control;
  const std::string db = (dir / "db.sqlite").string();
  const std::string id = train_run(cfg, obs, control, TrainOptions{db, ""});
  ExperimentStore store(db);
  const auto samples = store.samples(id);
  ASSERT_EQ(samples.size(), 6u) << "steps 2, 4 and the last (5), two prompts each";
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(samples[i].step, std::vector<int64_t>({2, 2, 4, 4, 5, 5})[i]);
    EXPECT_EQ(samples[i].prompt_index, static_cast<int64_t>(i % 2));
    EXPECT_EQ(samples[i].prompt, cfg.sample_prompts[i % 2]);
    EXPECT_GT(samples[i].tokens, 0);
    EXPECT_LE(samples[i].tokens, cfg.sample_max_new_tokens);
    EXPECT_TRUE(samples[i].finish_reason == "stop" || samples[i].finish_reason == "length") << samples[i].finish_reason;
  }
  // The last step's answers are those of the adapter the run wrote (greedy, same prompts, same backend).
  GeneratorOptions go;
  go.model_dir = cfg.base_model;
  go.adapter = cfg.output_dir;
  go.backend = "cpu";
  Generator gen(go);
  std::vector<GenerateRequest> reqs(2);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].messages_json = cfg.sample_prompts[i];
    reqs[i].sampling.max_new_tokens = cfg.sample_max_new_tokens;
  }
  const auto answers = gen.generate(reqs);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(samples[4 + i].text, answers[i].text) << "prompt " << i;
    EXPECT_EQ(samples[4 + i].tokens, static_cast<int64_t>(answers[i].token_ids.size())) << "prompt " << i;
  }
  fs::remove_all(dir);
}

TEST(SamplePrompts, BadFileFailsBeforeTraining) {
  const fs::path dir = fs::temp_directory_path() / ("dt_sample_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  RunConfig cfg = demo_config(dir);
  cfg.sample_prompts.clear();
  cfg.sample_prompts_file = (dir / "p.jsonl").string();
  std::ofstream(cfg.sample_prompts_file) << R"({"messages": [{"role": "user", "content": "ok"}]})" << "\n"
                                         << "{not json}\n";
  Quiet obs;
  RunControl control;
  const std::string msg = error_of([&] { train_run(cfg, obs, control, TrainOptions{(dir / "db").string(), ""}); });
  EXPECT_NE(msg.find("p.jsonl:2"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(fs::path(cfg.output_dir) / "adapter_model.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltatune
