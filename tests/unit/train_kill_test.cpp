// Kill safety: `deltatune train` killed with SIGKILL at random moments leaves a database that passes
// PRAGMA integrity_check, a run marked crashed, checkpoints that all load, and a run that resumes to
// the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "cli_run.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/lora_spec.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using testing_cli::spawn;
using testing_cli::wait_exit;

TEST(TrainKill, SigkillAtRandomMomentsNeverLosesTheRun) {
  if (!fs::exists(DT_CLI_PATH)) GTEST_SKIP() << "deltatune CLI not built";
  const fs::path demo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";
  const fs::path dir = fs::temp_directory_path() / ("dt_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream y(dir / "run.yaml");
    y << "base_model: " << (demo / "model").string() << "\n"
      << "datasets:\n  - path: " << (demo / "data" / "demo_chat.jsonl").string() << "\n"
      << "sequence_len: 128\nsample_packing: true\nmicro_batch_size: 1\nmax_steps: 40\nsave_steps: 2\n"
      << "save_total_limit: 3\nlearning_rate: 0.003\nbackend: cpu\noutput_dir: out\n"
      << "dataset_prepared_path: cache\nlora_target_groups: [attn, linear_attn, mlp]\n";
  }
  const std::string db = (dir / "db.sqlite").string();
  const std::string cli = DT_CLI_PATH;
  std::mt19937 rng(7);
  std::string run_id;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> args = {cli, "train", "--db", db};
    if (run_id.empty()) args.push_back((dir / "run.yaml").string());
    else args.insert(args.end(), {"--resume", run_id});
    const pid_t pid = spawn(args, dir / "log.txt");
    std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 2000));
    kill(pid, SIGKILL);
    wait_exit(pid);

    ExperimentStore store(db);
    EXPECT_EQ(store.integrity_check(), "ok");
    store.mark_crashed_runs();
    const auto runs = store.list_runs();
    if (runs.empty()) continue;  // killed before the run was recorded: nothing to lose yet
    ASSERT_EQ(runs.size(), 1u);
    run_id = runs[0].id;
    if (runs[0].status == "finished") break;  // a fast machine finished before the kill
    EXPECT_TRUE(runs[0].status == "crashed" || runs[0].status == "finished") << runs[0].status;
    for (const auto& [step, path] : checkpoint_list((dir / "out").string()))
      EXPECT_NO_THROW(checkpoint_load(path)) << path;
  }
  ASSERT_FALSE(run_id.empty()) << "the run never started; see " << (dir / "log.txt");
  if (ExperimentStore(db).find_run(run_id)->status != "finished") {
    const pid_t pid = spawn({cli, "train", "--db", db, "--resume", run_id}, dir / "log.txt");
    ASSERT_EQ(wait_exit(pid), 0) << "resume failed; see " << (dir / "log.txt");
  }
  ExperimentStore store(db);
  const auto run = store.find_run(run_id);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->status, "finished");
  const auto m = store.metrics(run_id);
  ASSERT_EQ(m.size(), 40u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].step, static_cast<int64_t>(i + 1));
  EXPECT_TRUE(fs::exists(dir / "out" / "adapter_model.safetensors"));
  fs::remove_all(dir);
}

// Two `train --resume` of the same run started together: exactly one trains, the other fails at once
// saying the run is running (or already finished, when it came late), and the run ends with each step's
// metrics once. The run is claimed atomically in the database before anything is loaded, so this holds
// however the two processes are scheduled.
TEST(TrainKill, TwoResumesOfOneRunRacingTrainItOnce) {
  if (!fs::exists(DT_CLI_PATH)) GTEST_SKIP() << "deltatune CLI not built";
  const fs::path demo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";
  const fs::path dir = fs::temp_directory_path() / ("dt_race_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ostringstream y;
  y << "base_model: " << (demo / "model").string() << "\n"
    << "datasets:\n  - path: " << (demo / "data" / "demo_chat.jsonl").string() << "\n"
    << "sequence_len: 64\nsample_packing: true\nmicro_batch_size: 1\nmax_steps: 4\nsave_steps: 2\n"
    << "backend: cpu\noutput_dir: " << (dir / "out").string() << "\n"
    << "dataset_prepared_path: " << (dir / "cache").string() << "\nlora_target_groups: [attn]\n";
  const std::string db = (dir / "db.sqlite").string();
  std::string id;
  {
    ExperimentStore store(db);
    RunRecord r;
    r.status = "crashed";  // as a killed run is found: resumable, no checkpoint yet
    r.config_yaml = y.str();
    r.output_dir = (dir / "out").string();
    id = store.create_run(r);
  }
  const std::string cli = DT_CLI_PATH;
  const pid_t a = spawn({cli, "train", "--db", db, "--resume", id}, dir / "a.txt");
  const pid_t b = spawn({cli, "train", "--db", db, "--resume", id}, dir / "b.txt");
  const int ra = wait_exit(a), rb = wait_exit(b);
  EXPECT_TRUE((ra == 0 && rb == 1) || (ra == 1 && rb == 0)) << "exit codes " << ra << ", " << rb;
  std::ifstream loser(dir / (ra == 0 ? "b.txt" : "a.txt"));
  const std::string msg((std::istreambuf_iterator<char>(loser)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(msg.find("is still running (pid") != std::string::npos ||
              msg.find("already finished") != std::string::npos)
      << msg;
  std::ifstream winner(dir / (ra == 0 ? "a.txt" : "b.txt"));
  const std::string log((std::istreambuf_iterator<char>(winner)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("done; output in " + (dir / "out").string()), std::string::npos)
      << "a resume names the run's output folder, not the default one\n" << log;
  ExperimentStore store(db);
  EXPECT_EQ(store.integrity_check(), "ok");
  EXPECT_EQ(store.find_run(id)->status, "finished");
  const auto m = store.metrics(id);
  ASSERT_EQ(m.size(), 4u) << "both resumes trained";
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].step, static_cast<int64_t>(i + 1));
  for (const auto& [step, path] : checkpoint_list((dir / "out").string())) EXPECT_NO_THROW(checkpoint_load(path));
  fs::remove_all(dir);
}

// The claim of a resume: a live owner refuses a second claim; a failed resume gives the run back with the
// status it had; a dead owner's run may be claimed.
TEST(TrainKill, ClaimRunIsExclusiveAndReleasable) {
  const fs::path dir = fs::temp_directory_path() / ("dt_claim_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ExperimentStore store((dir / "db.sqlite").string());
  RunRecord r;
  r.status = "cancelled";
  const std::string id = store.create_run(r);
  const RunRecord before = store.claim_run(id, ::getpid());
  EXPECT_EQ(before.status, "cancelled");
  EXPECT_EQ(store.find_run(id)->status, "running");
  try {
    store.claim_run(id, ::getpid());
    ADD_FAILURE() << "a second claim of a run owned by a live process succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("is still running (pid " + std::to_string(::getpid())), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(store.release_run(before, ::getpid()));
  EXPECT_EQ(store.find_run(id)->status, "cancelled");
  // Owned by a process that is gone: claimable, and put back as crashed.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  store.claim_run(id, dead);
  const RunRecord again = store.claim_run(id, ::getpid());
  EXPECT_EQ(again.status, "crashed");
  EXPECT_FALSE(store.release_run(again, dead)) << "only the owner may give the run back";
  EXPECT_TRUE(store.release_run(again, ::getpid()));
  EXPECT_EQ(store.find_run(id)->status, "crashed");
  store.set_status(id, "finished");
  EXPECT_THROW(store.claim_run(id, ::getpid()), std::exception);
  fs::remove_all(dir);
}

// `deltatune export` killed with SIGKILL at moments spread over its measured duration: the --out folder is
// absent or a complete adapter (never weights without config, nor temp files only), an earlier export
// there is either kept whole or replaced whole, and the next export clears the killed ones' leftovers.
TEST(TrainKill, ExportKilledAtAnyMomentLeavesNoHalfAdapter) {
  if (!fs::exists(DT_CLI_PATH)) GTEST_SKIP() << "deltatune CLI not built";
  const fs::path model = fs::path(DT_SOURCE_DIR) / "resources" / "demo" / "model";
  const fs::path dir = fs::temp_directory_path() / ("dt_export_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ModelConfig mc;
  {
    const ModelWeights w = model_weights_load(model.string());
    mc = w.config;
    RunConfig cfg;
    cfg.lora_r = 64;  // a few MB of weights: a write that takes a while
    const LoraAdapter a = lora_create(w.config, lora_spec_from_run_config(cfg), 1);
    peft_adapter_write(a, w.config, peft_class_prefix(w.key_prefix, "auto"), model.string(), (dir / "adapter").string());
  }
  const std::string cli = DT_CLI_PATH;
  auto export_to = [&](const fs::path& out) {
    return std::vector<std::string>{cli, "export", "--adapter", (dir / "adapter").string(), "--model",
                                    model.string(), "--out", out.string()};
  };
  const std::set<std::string> complete = {"README.md", "adapter_config.json", "adapter_model.safetensors"};
  auto files_of = [](const fs::path& d) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.insert(e.path().filename().string());
    return names;
  };
  double longest = 0;  // seconds of an undisturbed export on this machine, now
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(wait_exit(spawn(export_to(dir / "probe"), dir / "log.txt")), 0) << "see " << (dir / "log.txt");
    longest = std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  ASSERT_EQ(files_of(dir / "probe"), complete);
  const int rounds = 24;
  for (int i = 0; i < rounds; ++i) {
    const fs::path out = dir / ("e" + std::to_string(i));
    const bool replace = i % 2 == 1;  // over an earlier export
    if (replace) fs::copy(dir / "probe", out);
    const pid_t pid = spawn(export_to(out), dir / "log.txt");
    std::this_thread::sleep_for(std::chrono::duration<double>(longest * 1.2 * i / rounds));
    kill(pid, SIGKILL);
    wait_exit(pid);
    if (!replace && !fs::exists(out)) continue;
    ASSERT_TRUE(fs::is_directory(out)) << out;
    EXPECT_EQ(files_of(out), complete) << "half-written export in " << out << " (killed after "
                                       << longest * 1.2 * i / rounds << " s)";
    EXPECT_NO_THROW(peft_adapter_read(out.string(), mc)) << out;
  }
  ASSERT_EQ(wait_exit(spawn(export_to(dir / "last"), dir / "log.txt")), 0);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos)
        << "a killed export's leftover was not cleared: " << e.path();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltatune
