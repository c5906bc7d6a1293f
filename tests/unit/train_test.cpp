// End-to-end training on the CPU backend: the loss falls, a stopped-and-resumed run reproduces the
// straight run bit for bit, and bad settings fail before any training.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kDemo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";

struct Recorder : RunObserver {
  std::vector<double> losses;
  std::vector<int64_t> steps;
  int64_t stop_after = -1;
  RunControl* control = nullptr;
  std::string status;
  void on_step(const StepMetrics& m) override {
    losses.push_back(m.loss);
    steps.push_back(m.step);
    if (stop_after > 0 && m.step == stop_after && control) control->stop = true;
  }
  void on_finished(const std::string& s, const std::string&) override { status = s; }
};

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("dt_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunConfig demo_config(const fs::path& out) {
  RunConfig cfg = run_config_from_yaml_file((kDemo / "demo_run.yaml").string());
  cfg.output_dir = (out / "run").string();
  cfg.dataset_prepared_path = (out / "cache").string();
  cfg.backend = "cpu";
  cfg.val_set_size = 0;
  cfg.eval_steps = 0;
  cfg.save_steps = 0;
  return cfg;
}

TEST(Train, DemoLossFallsClearly) {
  const fs::path dir = fresh_dir("loss");
  RunConfig cfg = demo_config(dir);
  cfg.max_steps = 40;
  cfg.learning_rate = 1e-2;
  cfg.warmup_steps = 2;
  Recorder rec;
  RunControl control;
  train_run(cfg, rec, control, TrainOptions{(dir / "db.sqlite").string(), ""});
  ASSERT_EQ(rec.losses.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += rec.losses[i] / 5;
    last += rec.losses[rec.losses.size() - 1 - i] / 5;
  }
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
  EXPECT_TRUE(fs::exists(fs::path(cfg.output_dir) / "adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(cfg.output_dir) / "adapter_config.json"));
  ExperimentStore store((dir / "db.sqlite").string());
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "finished");
  EXPECT_EQ(store.metrics(runs[0].id).size(), 40u);
  EXPECT_EQ(store.metrics(runs[0].id)[0].moe_load_max_ratio, -1) << "dense model: no router statistics";
  fs::remove_all(dir);
}

TEST(Train, StopAndResumeIsBitIdentical) {
  const fs::path dir = fresh_dir("resume");
  RunConfig cfg = demo_config(dir);
  cfg.max_steps = 20;
  cfg.sequence_len = 128;
  cfg.micro_batch_size = 1;
  cfg.gradient_accumulation_steps = 2;
  cfg.lora_dropout = 0.1;  // dropout masks must replay too
  cfg.save_total_limit = 1;

  Recorder straight;
  RunControl c1;
  RunConfig a = cfg;
  a.output_dir = (dir / "a").string();
  train_run(a, straight, c1, TrainOptions{(dir / "db.sqlite").string(), ""});
  ASSERT_EQ(straight.losses.size(), 20u);

  RunConfig b = cfg;
  b.output_dir = (dir / "b").string();
  Recorder first;
  RunControl c2;
  first.control = &c2;
  first.stop_after = 10;
  const std::string id = train_run(b, first, c2, TrainOptions{(dir / "db.sqlite").string(), ""});
  EXPECT_EQ(first.status, "cancelled");
  ASSERT_EQ(first.losses.size(), 10u);

  Recorder second;
  RunControl c3;
  train_run(b, second, c3, TrainOptions{(dir / "db.sqlite").string(), id});
  ASSERT_EQ(second.losses.size(), 10u);
  EXPECT_EQ(second.steps.front(), 11);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(first.losses[i], straight.losses[i]) << "step " << i + 1;
    EXPECT_EQ(second.losses[i], straight.losses[10 + i]) << "step " << 11 + i;
  }
  ExperimentStore store((dir / "db.sqlite").string());
  const auto m = store.metrics(id);
  ASSERT_EQ(m.size(), 20u) << "metrics after the checkpoint must not be duplicated";
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].step, static_cast<int64_t>(i + 1));
  EXPECT_EQ(store.find_run(id)->status, "finished");
  fs::remove_all(dir);
}

TEST(Train, BadAdapterFailsBeforeTraining) {
  const fs::path dir = fresh_dir("bad");
  RunConfig cfg = demo_config(dir);
  cfg.lora_model_dir = (fs::path(DT_SOURCE_DIR) / "tests" / "goldens" / "lora" / "dense_vl" / "adapter").string();
  Recorder rec;
  RunControl control;
  EXPECT_THROW(train_run(cfg, rec, control, TrainOptions{"-", ""}), Error);
  EXPECT_TRUE(rec.losses.empty());
  EXPECT_FALSE(fs::exists(fs::path(cfg.output_dir) / "adapter_model.safetensors"));
  fs::remove_all(dir);
}

// One SGD step with lr 1 from a PEFT adapter reproduces PEFT's own update (grads from HF + PEFT, fp32):
// W' = W - dL/dW, L = Σ CE over the targets of all three sequences / their count.
TEST(Train, SgdStepFromPeftAdapterMatchesPeft) {
  const fs::path g = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";
  const fs::path dir = fresh_dir("sgd");
  RunConfig cfg;
  cfg.base_model = (g / "models" / "dense_vl").string();
  cfg.datasets = {{(g / "models" / "dense_vl" / "golden_eval.jsonl").string(), "", ""}};
  cfg.dataset_prepared_path = (dir / "cache").string();
  cfg.lora_model_dir = (g / "lora" / "dense_vl" / "adapter").string();
  cfg.optimizer = "sgd";
  cfg.learning_rate = 1.0;
  cfg.lr_scheduler = "constant";
  cfg.max_grad_norm = 0;
  cfg.micro_batch_size = 3;
  cfg.max_steps = 1;
  cfg.sequence_len = 128;
  cfg.backend = "cpu";
  cfg.output_dir = (dir / "out").string();
  Recorder rec;
  RunControl control;
  train_run(cfg, rec, control, TrainOptions{"-", ""});
  SafetensorsFile got((dir / "out" / "adapter_model.safetensors").string());
  SafetensorsFile want((g / "lora" / "dense_vl" / "sgd_step.safetensors").string());
  ASSERT_EQ(got.entries().size(), want.entries().size());
  for (const auto& e : want.entries()) {
    ASSERT_TRUE(got.has(e.name)) << e.name;
    const auto a = host_to_f32(got.get(e.name)), b = host_to_f32(want.get(e.name));
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      err2 += double(a[i] - b[i]) * (a[i] - b[i]);
      ref2 += double(b[i]) * b[i];
    }
    EXPECT_LE(std::sqrt(err2 / ref2), 1e-4) << e.name;  // the fp32 bar; measured ≤ 5e-5
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltatune
