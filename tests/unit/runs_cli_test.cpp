// `deltatune runs ...` end to end: the real binary against a prepared database.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"

#include "cli_run.h"

namespace fs = std::filesystem;
using namespace deltatune;

namespace {

using deltatune::testing_cli::run_cli;

struct Fixture {
  fs::path dir;
  std::string db;
  std::string a, b, dead;
  Fixture() {
    dir = fs::temp_directory_path() / ("dt_runs_cli_" + std::to_string(getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    db = (dir / "e.db").string();
    ExperimentStore store(db);
    RunConfig ca;
    ca.base_model = "/models/Qwen3.5-tiny";
    ca.datasets = {{"train.jsonl", "chat", ""}};
    ca.output_dir = (dir / "out_a").string();
    RunConfig cb = ca;
    cb.learning_rate = 1e-3;
    cb.lora_r = 32;
    cb.output_dir = (dir / "out_b").string();
    auto record = [&](const RunConfig& c, const std::string& name) {
      RunRecord r;
      r.name = name;
      r.model = c.base_model;
      r.datasets = "train.jsonl";
      r.config_yaml = run_config_to_yaml(c);
      r.output_dir = c.output_dir;
      r.status = "finished";
      r.total_steps = 3;
      return r;
    };
    a = store.create_run(record(ca, "baseline"));
    b = store.create_run(record(cb, "high-lr"));
    for (int s = 1; s <= 3; ++s) {
      StepMetrics m;
      m.step = s;
      m.total_steps = 3;
      m.loss = 2.0 - 0.25 * s;
      m.eval_loss = s == 3 ? 1.6 : -1;
      m.tokens_seen = 100 * s;
      store.add_metrics(a, m);
      m.loss += 0.5;
      store.add_metrics(b, m);
    }
    store.add_artifact({a, "checkpoint", ca.output_dir + "/checkpoint-3", 3, ""});
    store.add_event(a, "info", "training finished");
    RunRecord d = record(ca, "ghost");
    d.status = "running";
    d.pid = 999999999;  // no such process
    dead = store.create_run(d);
    fs::create_directories(cb.output_dir);
    std::ofstream(fs::path(cb.output_dir) / "adapter_config.json") << "{}";
  }
  ~Fixture() { fs::remove_all(dir); }
};

}  // namespace

TEST(RunsCli, ListMarksCrashedAndShowsTable) {
  Fixture f;
  const auto r = run_cli("runs list --db " + f.db);
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const auto& s : {"ID", "NAME", "STATUS", "BEST EVAL", f.a.c_str(), f.b.c_str(), "baseline", "high-lr",
                        "Qwen3.5-tiny", "3/3", "1.2500", "1.6000", "crashed"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " not in\n" << r.out;

  const auto j = run_cli("runs list --json --db " + f.db);
  ASSERT_EQ(j.rc, 0) << j.out;
  const auto arr = nlohmann::json::parse(j.out);
  ASSERT_EQ(arr.size(), 3u);
  EXPECT_EQ(arr[0]["id"], f.dead);  // newest first
  EXPECT_EQ(arr[0]["status"], "crashed");
  EXPECT_EQ(arr[2]["id"], f.a);
  EXPECT_DOUBLE_EQ(arr[2]["final_loss"].get<double>(), 1.25);
  EXPECT_TRUE(arr[0]["final_loss"].is_null());
}

TEST(RunsCli, ShowAndCompare) {
  Fixture f;
  const auto s = run_cli("runs show baseline --db " + f.db);
  ASSERT_EQ(s.rc, 0) << s.out;
  for (const auto& want :
       {"run " + f.a + " (baseline)", std::string("status      finished"),
        std::string("first 1.7500   final 1.2500"), std::string("best eval   1.6000 (step 3)"),
        std::string("checkpoint-3"), std::string("training finished"), std::string("  learning_rate: 2e-04")})
    EXPECT_NE(s.out.find(want), std::string::npos) << want << " not in\n" << s.out;

  const auto c = run_cli("runs compare " + f.a + " " + f.b.substr(0, 5) + " --db " + f.db);
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("config differences (3 of"), std::string::npos) << c.out;  // lr, lora_r, output_dir
  EXPECT_NE(c.out.find("learning_rate"), std::string::npos);
  EXPECT_NE(c.out.find("0.001"), std::string::npos);
  EXPECT_NE(c.out.find("lora_r"), std::string::npos);
  EXPECT_EQ(c.out.find("base_model"), std::string::npos) << "an equal key is listed:\n" << c.out;
  EXPECT_NE(c.out.find("final loss"), std::string::npos);
  EXPECT_NE(c.out.find("1.7500"), std::string::npos);  // b's final loss

  const auto cj = run_cli("runs compare baseline high-lr --json --db " + f.db);
  ASSERT_EQ(cj.rc, 0) << cj.out;
  const auto j = nlohmann::json::parse(cj.out);
  EXPECT_EQ(j["config_differences"].size(), 3u);
  EXPECT_EQ(j["config_differences"]["lora_r"], nlohmann::json({"16", "32"}));
}

TEST(RunsCli, TagDeleteAndErrors) {
  Fixture f;
  auto t = run_cli("runs tag high-lr keeper --db " + f.db);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_EQ(ExperimentStore(f.db).find_run(f.b)->tags, std::vector<std::string>{"keeper"});

  auto d = run_cli("runs delete high-lr --files --db " + f.db);
  ASSERT_EQ(d.rc, 0) << d.out;
  EXPECT_FALSE(ExperimentStore(f.db).find_run(f.b));
  EXPECT_FALSE(fs::exists(f.dir / "out_b"));
  d = run_cli("runs delete baseline --db " + f.db);  // rows only
  ASSERT_EQ(d.rc, 0) << d.out;
  EXPECT_FALSE(ExperimentStore(f.db).find_run(f.a));

  auto e = run_cli("runs show nosuchrun --db " + f.db);
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.out.find("no run 'nosuchrun'"), std::string::npos) << e.out;
  e = run_cli("runs frobnicate --db " + f.db);
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.out.find("unknown 'runs' command 'frobnicate'"), std::string::npos) << e.out;
  e = run_cli("runs list --bogus");
  EXPECT_EQ(e.rc, 1);
  EXPECT_EQ(ExperimentStore(f.db).integrity_check(), "ok");
}
