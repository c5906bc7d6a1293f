// Bad things happening to a run's files while it trains: the dataset deleted or replaced, the disk full
// while a checkpoint is written, the output folder read-only. In each case the run either is not hurt or
// fails with an error naming the path, is marked failed in the database, and leaves every earlier
// checkpoint loadable and no half-written one behind.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "error_text.h"
#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "deltatune/trainer.h"
#include "io/files.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kDemo = fs::path(DT_SOURCE_DIR) / "resources" / "demo";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dt_safety_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(path, ec))
      if (e.is_directory(ec)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string db() const { return (path / "db.sqlite").string(); }
  std::string out() const { return (path / "out").string(); }
};

// Calls back at every step (before that step's checkpoint is written).
struct StepHook : RunObserver {
  std::function<void(int64_t)> at_step;
  std::vector<double> losses;
  std::string status, message;
  void on_step(const StepMetrics& m) override {
    losses.push_back(m.loss);
    if (at_step) at_step(m.step);
  }
  void on_finished(const std::string& s, const std::string& msg) override {
    status = s;
    message = msg;
  }
};

// A tiny run on the demo model over a private copy of its dataset (the tests delete and replace it).
RunConfig small_run(const TempDir& tmp, int64_t steps, int64_t save_steps) {
  RunConfig cfg = run_config_from_yaml_file((kDemo / "demo_run.yaml").string());
  const fs::path data = tmp.path / "data.jsonl";
  if (!fs::exists(data)) fs::copy_file(kDemo / "data" / "demo_chat.jsonl", data);
  cfg.datasets = {{data.string(), "chat", ""}};
  cfg.output_dir = tmp.out();
  cfg.dataset_prepared_path = (tmp.path / "cache").string();
  cfg.backend = "cpu";
  cfg.val_set_size = 0;
  cfg.eval_steps = 0;
  cfg.sequence_len = 64;
  cfg.micro_batch_size = 1;
  cfg.max_steps = steps;
  cfg.save_steps = save_steps;
  cfg.save_total_limit = 0;
  return cfg;
}

std::vector<std::string> leftovers(const std::string& out) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec))
    if (e.path().filename().string().find(".tmp") != std::string::npos) found.push_back(e.path().string());
  return found;
}

std::vector<int64_t> checkpoint_steps(const std::string& out) {
  std::vector<int64_t> steps;
  for (const auto& [step, path] : checkpoint_list(out)) steps.push_back(step);
  return steps;
}

bool has_error_event(ExperimentStore& store, const std::string& run_id, const std::string& text) {
  for (const auto& e : store.events(run_id))
    if (e.level == "error" && e.message.find(text) != std::string::npos) return true;
  return false;
}

// Runs `body` in a forked child (resource limits and dropped capabilities stay there) and returns its
// exit code; what it wrote to `message` is read back by the caller.
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr int kTrainError = 3, kFinished = 4, kCannotTest = 77;

// The child's train_run: kTrainError when it threw Error (message written to `message_file`).
int train_in_child(const RunConfig& cfg, StepHook& hook, const std::string& db, const std::string& message_file) {
  RunControl control;
  try {
    train_run(cfg, hook, control, TrainOptions{db, ""});
  } catch (const Error& e) {
    std::ofstream(message_file) << e.what();
    return kTrainError;
  }
  return kFinished;
}

// Root ignores folder permissions through CAP_DAC_OVERRIDE; dropping it (and DAC_READ_SEARCH) from this
// thread's effective set makes root obey them like anyone else. Threads started later inherit the set.
bool obey_file_permissions() {
  if (::geteuid() != 0) return true;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (const int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH}) data[cap / 32].effective &= ~(1u << (cap % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Deleting, truncating or replacing the dataset while the run trains changes nothing: data_prepare reads
// and tokenizes everything before step 1, so the losses are bit-identical to an undisturbed run.
TEST(TrainSafety, DatasetDeletedOrReplacedMidRunDoesNotTouchTheRun) {
  TempDir tmp;
  RunConfig cfg = small_run(tmp, 4, 2);
  StepHook straight;
  RunControl c1;
  RunConfig a = cfg;
  a.output_dir = (tmp.path / "a").string();
  train_run(a, straight, c1, TrainOptions{tmp.db(), ""});
  ASSERT_EQ(straight.losses.size(), 4u);

  const fs::path data = cfg.datasets[0].path;
  RunConfig b = cfg;
  b.dataset_prepared_path = (tmp.path / "cache_b").string();  // read the file, not a.'s token cache
  StepHook disturbed;
  disturbed.at_step = [&](int64_t step) {
    if (step == 1) fs::remove(data);
    if (step == 2) std::ofstream(data) << "{\"messages\": [";  // truncated mid-row
    if (step == 3) std::ofstream(data) << "{\"text\": \"something else entirely\"}\n";
  };
  RunControl c2;
  const std::string id = train_run(b, disturbed, c2, TrainOptions{tmp.db(), ""});
  EXPECT_EQ(disturbed.status, "finished");
  ASSERT_EQ(disturbed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(disturbed.losses[i], straight.losses[i]) << "step " << i + 1;

  ExperimentStore store(tmp.db());
  EXPECT_EQ(store.integrity_check(), "ok");
  EXPECT_EQ(store.find_run(id)->status, "finished");
  EXPECT_EQ(store.metrics(id).size(), 4u);
  EXPECT_EQ(checkpoint_steps(tmp.out()), (std::vector<int64_t>{2, 4}));
  for (const auto& [step, path] : checkpoint_list(tmp.out())) EXPECT_NO_THROW(checkpoint_load(path)) << path;
  EXPECT_TRUE(leftovers(tmp.out()).empty());
}

// A resume re-reads the datasets. Deleted: the resume fails naming the file. Replaced by different data:
// it fails saying the data changed (the checkpoint's data position would mean other examples). Either
// way the run keeps its status (resumable), the reason is in its events, the checkpoint still loads;
// with the file restored the resume completes.
TEST(TrainSafety, ResumeAfterTheDatasetChangedFailsCleanly) {
  TempDir tmp;
  RunConfig cfg = small_run(tmp, 4, 2);
  const fs::path data = cfg.datasets[0].path;
  StepHook first;
  RunControl c1;
  first.at_step = [&](int64_t step) {
    if (step == 2) c1.stop = true;
  };
  const std::string id = train_run(cfg, first, c1, TrainOptions{tmp.db(), ""});
  ASSERT_EQ(first.status, "cancelled");
  const std::string original = read_text_file(data.string());

  auto resume = [&] {
    StepHook h;
    RunControl c;
    train_run(cfg, h, c, TrainOptions{tmp.db(), id});
  };
  auto event_logged = [&](const std::string& run_id, const std::string& text) {
    ExperimentStore store(tmp.db());
    return has_error_event(store, run_id, text);
  };
  auto run_is_intact = [&](const std::string& when) {
    ExperimentStore store(tmp.db());
    EXPECT_EQ(store.integrity_check(), "ok") << when;
    EXPECT_EQ(store.find_run(id)->status, "cancelled") << when;
    EXPECT_EQ(checkpoint_steps(tmp.out()), std::vector<int64_t>{2}) << when;
    EXPECT_NO_THROW(checkpoint_load((fs::path(tmp.out()) / "checkpoint-2").string())) << when;
    EXPECT_TRUE(leftovers(tmp.out()).empty()) << when;
  };

  fs::remove(data);
  std::string msg = error_of(resume);
  EXPECT_NE(msg.find(data.string() + ": dataset file not found"), std::string::npos) << msg;
  run_is_intact("dataset deleted");
  EXPECT_TRUE(event_logged(id, "dataset file not found"));

  // The first half of the rows, cut at a row boundary: the file parses, only the content differs.
  std::ofstream(data) << original.substr(0, original.rfind('\n', original.size() / 2) + 1);
  msg = error_of(resume);
  EXPECT_NE(msg.find("training data (" + data.string() + ") changed since"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint-2"), std::string::npos) << msg;
  run_is_intact("dataset replaced");
  EXPECT_TRUE(event_logged(id, "changed since"));

  std::ofstream(data, std::ios::trunc) << original;
  EXPECT_NO_THROW(resume());
  ExperimentStore store(tmp.db());
  EXPECT_EQ(store.find_run(id)->status, "finished");
  const auto m = store.metrics(id);
  ASSERT_EQ(m.size(), 4u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].step, static_cast<int64_t>(i + 1));
}

// The disk fills up while checkpoint-4 is written (a per-file size limit set in a child process just
// before that save: writes past it fail with EFBIG like ENOSPC would, and the database files stay under
// it). The run fails naming the checkpoint, is marked failed, checkpoint-2 still loads and is resumed
// from, and nothing of checkpoint-4 is left.
TEST(TrainSafety, FullDiskWhileSavingACheckpointFailsTheRun) {
  TempDir tmp;
  RunConfig cfg = small_run(tmp, 6, 2);
  cfg.lora_r = 32;  // checkpoint files well above the database's size, so only they hit the limit
  const std::string message_file = (tmp.path / "message.txt").string();
  const int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing us
    StepHook hook;
    hook.at_step = [&](int64_t step) {
      if (step != 4) return;
      uintmax_t db_bytes = 0;
      for (const auto& e : fs::directory_iterator(tmp.path))
        if (e.is_regular_file()) db_bytes = std::max<uintmax_t>(db_bytes, e.file_size());
      rlimit lim{};
      ::getrlimit(RLIMIT_FSIZE, &lim);
      lim.rlim_cur = db_bytes + (64u << 10);  // the database may still grow a little (events, status)
      ::setrlimit(RLIMIT_FSIZE, &lim);
    };
    return train_in_child(cfg, hook, tmp.db(), message_file);
  });
  ASSERT_EQ(rc, kTrainError) << "the save of checkpoint-4 should have failed";
  const std::string msg = read_text_file(message_file);
  const std::string ckpt4 = (fs::path(tmp.out()) / "checkpoint-4").string();
  EXPECT_NE(msg.find("cannot write checkpoint '" + ckpt4 + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;

  ExperimentStore store(tmp.db());
  EXPECT_EQ(store.integrity_check(), "ok");
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_TRUE(has_error_event(store, runs[0].id, ckpt4));
  EXPECT_EQ(checkpoint_steps(tmp.out()), std::vector<int64_t>{2});
  EXPECT_NO_THROW(checkpoint_load((fs::path(tmp.out()) / "checkpoint-2").string()));
  EXPECT_TRUE(leftovers(tmp.out()).empty()) << leftovers(tmp.out()).front();

  StepHook resumed;
  RunControl control;
  train_run(cfg, resumed, control, TrainOptions{tmp.db(), runs[0].id});
  ASSERT_EQ(resumed.losses.size(), 4u) << "resumes after checkpoint-2";
  EXPECT_EQ(store.find_run(runs[0].id)->status, "finished");
  EXPECT_EQ(store.metrics(runs[0].id).size(), 6u);
}

// A read-only output folder fails the run before step 1 (not at the first checkpoint), naming the folder;
// one that turns read-only mid-run fails at the next checkpoint with the earlier ones intact.
TEST(TrainSafety, ReadOnlyOutputDirFailsTheRun) {
  TempDir tmp;
  const std::string message_file = (tmp.path / "message.txt").string();
  RunConfig cfg = small_run(tmp, 4, 1);
  fs::create_directories(tmp.out());
  fs::permissions(tmp.out(), fs::perms::owner_read | fs::perms::owner_exec);
  int rc = in_child([&] {
    if (!obey_file_permissions()) return kCannotTest;
    StepHook hook;
    const int r = train_in_child(cfg, hook, tmp.db(), message_file);
    return hook.losses.empty() ? r : 10;  // 10: it trained before failing
  });
  if (rc == kCannotTest) GTEST_SKIP() << "cannot drop CAP_DAC_OVERRIDE here";
  ASSERT_EQ(rc, kTrainError);
  std::string msg = read_text_file(message_file);
  EXPECT_NE(msg.find("output_dir '" + tmp.out() + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  {
    ExperimentStore store(tmp.db());
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "failed");
    EXPECT_TRUE(store.metrics(runs[0].id).empty());
    EXPECT_TRUE(has_error_event(store, runs[0].id, "Permission denied"));
    store.delete_run(runs[0].id);
  }

  fs::permissions(tmp.out(), fs::perms::owner_all);
  rc = in_child([&] {
    if (!obey_file_permissions()) return kCannotTest;
    StepHook hook;
    hook.at_step = [&](int64_t step) {
      if (step == 2) fs::permissions(tmp.out(), fs::perms::owner_read | fs::perms::owner_exec);
    };
    return train_in_child(cfg, hook, tmp.db(), message_file);
  });
  ASSERT_EQ(rc, kTrainError);
  msg = read_text_file(message_file);
  EXPECT_NE(msg.find("cannot write checkpoint '" + (fs::path(tmp.out()) / "checkpoint-2").string() + "'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  ExperimentStore store(tmp.db());
  EXPECT_EQ(store.integrity_check(), "ok");
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_EQ(checkpoint_steps(tmp.out()), std::vector<int64_t>{1});
  EXPECT_NO_THROW(checkpoint_load((fs::path(tmp.out()) / "checkpoint-1").string()));
  EXPECT_TRUE(leftovers(tmp.out()).empty());
}

}  // namespace
}  // namespace deltatune
