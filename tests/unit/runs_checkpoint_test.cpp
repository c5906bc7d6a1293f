// Checkpoint folders: round trip, pruning, replacement, failures, leftovers, and SIGKILL at random moments.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "error_text.h"

namespace fs = std::filesystem;
using namespace deltatune;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dt_runs_ckpt_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string out() const { return (path / "out").string(); }
};

Tensor filled(Shape shape, float start) {
  Tensor t = host_tensor(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = start + static_cast<float>(i);
  return t;
}

// Stands in for peft_adapter_write: the checkpoint code only needs the two files to appear.
AdapterWriter fake_adapter(float value, int64_t numel = 6) {
  return [value, numel](const std::string& dir) {
    safetensors_write(
        dir + "/adapter_model.safetensors",
        {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", filled({numel}, value)}});
    write_text_file_atomic(dir + "/adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 2}\n");
  };
}

TrainerState state_at(int64_t step) {
  TrainerState s;
  s.step = step;
  s.total_steps = 100;
  s.epoch = step / 30.0;
  s.epoch_index = step / 30;
  s.micro_batch_index = (step % 30) * 4;
  s.seed = 42;
  s.rng_state = "12345 67890 state with spaces";
  s.scheduler_step = step;
  s.lr = 1.0 / 3.0 * 1e-4;
  s.tokens_seen = step * 1000;
  s.trained_tokens = step * 700;
  s.wall_seconds = step * 0.1;
  s.best_eval_loss = 1.5;
  s.run_id = "abcd1234";
  s.config_hash = "0123456789abcdef";
  s.extra = {{"note", "x"}};
  return s;
}

std::vector<std::pair<std::string, Tensor>> moments(float base) {
  return {{"layers.0.self_attn.q_proj.lora_A.exp_avg", filled({2, 3}, base)},
          {"layers.0.self_attn.q_proj.lora_A.exp_avg_sq", filled({2, 3}, base + 100)}};
}

std::vector<int64_t> steps_in(const std::string& out) {
  std::vector<int64_t> s;
  for (const auto& [step, path] : checkpoint_list(out)) s.push_back(step);
  return s;
}

// Names in `dir`, none when it does not exist (a writer killed before it made its output folder).
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> n;
  if (!fs::exists(dir)) return n;
  for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
  std::sort(n.begin(), n.end());
  return n;
}

}  // namespace

TEST(RunsCheckpoint, WriteLoadRoundTrip) {
  TempDir tmp;
  const std::string dir = checkpoint_write(tmp.out(), state_at(7), moments(0.5f), fake_adapter(1), 2);
  EXPECT_EQ(dir, (fs::path(tmp.out()) / "checkpoint-7").string());
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors",
                                                     "optimizer.safetensors", "trainer_state.json"}));
  EXPECT_EQ(names_in(tmp.out()), std::vector<std::string>{"checkpoint-7"});  // no temporary left
  const Checkpoint ck = checkpoint_load(dir);
  EXPECT_EQ(ck.state, state_at(7));  // doubles included: JSON keeps them exactly
  ASSERT_TRUE(ck.optimizer);
  const Tensor m = ck.optimizer->get("layers.0.self_attn.q_proj.lora_A.exp_avg_sq");
  EXPECT_EQ(m.shape, (Shape{2, 3}));
  EXPECT_EQ(m.dtype, DType::F32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.ptr<float>()[i], 100.5f + i);
  EXPECT_EQ(ck.optimizer->metadata().at("step"), "7");
  EXPECT_EQ(ck.adapter_dir(), dir);
  EXPECT_EQ(checkpoint_latest(tmp.out()), dir);

  // SGD: no moments is fine.
  const std::string sgd = checkpoint_write(tmp.out(), state_at(8), {}, fake_adapter(1), 2);
  EXPECT_TRUE(checkpoint_load(sgd).optimizer->entries().empty());
}

TEST(RunsCheckpoint, PrunesToSaveTotalLimit) {
  TempDir tmp;
  for (int s = 1; s <= 5; ++s) checkpoint_write(tmp.out(), state_at(s * 10), moments(s), fake_adapter(s), 2);
  EXPECT_EQ(steps_in(tmp.out()), (std::vector<int64_t>{40, 50}));
  checkpoint_write(tmp.out(), state_at(60), moments(6), fake_adapter(6), 1);
  EXPECT_EQ(steps_in(tmp.out()), (std::vector<int64_t>{60}));
  checkpoint_write(tmp.out(), state_at(70), moments(7), fake_adapter(7), 0);  // 0 keeps all
  checkpoint_write(tmp.out(), state_at(80), moments(8), fake_adapter(8), 0);
  EXPECT_EQ(steps_in(tmp.out()), (std::vector<int64_t>{60, 70, 80}));
  // Resumed from 60 and saved at 65: 70 and 80 belong to the abandoned run and would be taken as latest.
  checkpoint_write(tmp.out(), state_at(65), moments(9), fake_adapter(9), 3);
  EXPECT_EQ(steps_in(tmp.out()), (std::vector<int64_t>{60, 65}));
  EXPECT_EQ(checkpoint_latest(tmp.out()), (fs::path(tmp.out()) / "checkpoint-65").string());
  for (const auto& n : names_in(tmp.out())) EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n;
}

TEST(RunsCheckpoint, SameStepIsReplaced) {
  TempDir tmp;
  checkpoint_write(tmp.out(), state_at(5), moments(1), fake_adapter(1), 2);
  TrainerState s = state_at(5);
  s.tokens_seen = 999;
  checkpoint_write(tmp.out(), s, moments(2), fake_adapter(2), 2);
  EXPECT_EQ(names_in(tmp.out()), std::vector<std::string>{"checkpoint-5"});
  const Checkpoint ck = checkpoint_load((fs::path(tmp.out()) / "checkpoint-5").string());
  EXPECT_EQ(ck.state.tokens_seen, 999);
  EXPECT_EQ(ck.optimizer->get("layers.0.self_attn.q_proj.lora_A.exp_avg").ptr<float>()[0], 2.0f);
}

TEST(RunsCheckpoint, FailedWriteLeavesEverythingAsItWas) {
  TempDir tmp;
  checkpoint_write(tmp.out(), state_at(1), moments(1), fake_adapter(1), 1);
  const AdapterWriter failing = [](const std::string& dir) {
    std::ofstream(dir + "/adapter_model.safetensors") << "partial";
    throw Error("No space left on device");
  };
  const std::string msg =
      error_of([&] { checkpoint_write(tmp.out(), state_at(2), moments(2), failing, 1); });
  EXPECT_NE(msg.find("cannot write checkpoint '" + (fs::path(tmp.out()) / "checkpoint-2").string() + "'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos);
  EXPECT_EQ(names_in(tmp.out()), std::vector<std::string>{"checkpoint-1"});  // not pruned, no temporary
  EXPECT_NO_THROW(checkpoint_load((fs::path(tmp.out()) / "checkpoint-1").string()));

  const AdapterWriter lazy = [](const std::string&) {};
  EXPECT_NE(error_of([&] {
              checkpoint_write(tmp.out(), state_at(3), {}, lazy, 1);
            }).find("did not write adapter_config.json"),
            std::string::npos);
  EXPECT_EQ(names_in(tmp.out()), std::vector<std::string>{"checkpoint-1"});
}

TEST(RunsCheckpoint, UnwritableOutputDir) {
  TempDir tmp;
  std::ofstream(tmp.path / "file") << "x";
  const std::string not_dir = (tmp.path / "file" / "out").string();
  EXPECT_NE(error_of([&] {
              checkpoint_write(not_dir, state_at(1), {}, fake_adapter(1), 1);
            }).find("cannot create"),
            std::string::npos);
}

TEST(RunsCheckpoint, ReadOnlyOutputDir) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores folder permissions";
  TempDir tmp;
  fs::create_directories(tmp.out());
  fs::permissions(tmp.out(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string msg =
      error_of([&] { checkpoint_write(tmp.out(), state_at(1), {}, fake_adapter(1), 1); });
  EXPECT_NE(msg.find("cannot write checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
}

TEST(RunsCheckpoint, LoadNamesWhatIsWrong) {
  TempDir tmp;
  const auto fresh = [&](int64_t step) {
    return checkpoint_write(tmp.out(), state_at(step), moments(1), fake_adapter(1), 0);
  };
  std::string d = fresh(1);
  fs::remove(fs::path(d) / "optimizer.safetensors");
  EXPECT_NE(error_of([&] { checkpoint_load(d); }).find("is incomplete: optimizer.safetensors is missing"),
            std::string::npos);

  d = fresh(2);
  std::ofstream(fs::path(d) / "trainer_state.json")
      << "{\"format\": \"deltatune-checkpoint\", \"version\": 1}";
  EXPECT_NE(error_of([&] { checkpoint_load(d); }).find("field 'step' is missing"), std::string::npos);
  std::ofstream(fs::path(d) / "trainer_state.json") << "{not json";
  EXPECT_NE(error_of([&] { checkpoint_load(d); }).find("trainer_state.json: not valid JSON"),
            std::string::npos);

  d = fresh(3);
  fs::rename(d, fs::path(tmp.out()) / "checkpoint-4");
  EXPECT_NE(error_of([&] {
              checkpoint_load((fs::path(tmp.out()) / "checkpoint-4").string());
            }).find("does not match the folder name"),
            std::string::npos);

  d = fresh(5);
  fs::resize_file(fs::path(d) / "adapter_model.safetensors", 20);  // truncated
  EXPECT_NE(error_of([&] { checkpoint_load(d); }).find("adapter_model.safetensors"), std::string::npos);

  d = fresh(6);
  std::string state = read_text_file((fs::path(d) / "trainer_state.json").string());
  state.replace(state.find("\"version\": 1"), 12, "\"version\": 9");
  std::ofstream(fs::path(d) / "trainer_state.json") << state;
  EXPECT_NE(error_of([&] { checkpoint_load(d); }).find("format version 9 is not supported"),
            std::string::npos);

  EXPECT_NE(error_of([&] { checkpoint_load(tmp.out() + "/nope"); }).find("does not exist"),
            std::string::npos);
}

TEST(RunsCheckpoint, LatestSkipsBrokenAndCleansStaleLeftovers) {
  TempDir tmp;
  EXPECT_EQ(checkpoint_latest(tmp.out()), std::nullopt);  // no folder at all
  checkpoint_write(tmp.out(), state_at(10), moments(1), fake_adapter(1), 0);
  checkpoint_write(tmp.out(), state_at(20), moments(1), fake_adapter(1), 0);
  fs::remove(fs::path(tmp.out()) / "checkpoint-20" / "trainer_state.json");  // broken by hand

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const fs::path stale = fs::path(tmp.out()) / ("checkpoint-30.tmp-" + std::to_string(child));
  const fs::path stale_rm = fs::path(tmp.out()) / ("checkpoint-10.tmp-" + std::to_string(child) + "-rm");
  const fs::path live = fs::path(tmp.out()) / ("checkpoint-30.tmp-" + std::to_string(getppid()));
  // Too many digits for a pid: not a leftover of ours (and parsing it must not overflow).
  const fs::path odd = fs::path(tmp.out()) / "checkpoint-40.tmp-123456789012345678901234567890";
  for (const auto& p : {stale, stale_rm, live, odd}) {
    fs::create_directories(p);
    std::ofstream(p / "trainer_state.json") << "{}";
  }
  EXPECT_EQ(checkpoint_latest(tmp.out()), (fs::path(tmp.out()) / "checkpoint-10").string());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale_rm));
  EXPECT_TRUE(fs::exists(live));  // its writer may still be at work
  EXPECT_TRUE(fs::exists(odd));
  EXPECT_EQ(checkpoint_step_of("checkpoint-12"), 12);
  EXPECT_EQ(checkpoint_step_of("checkpoint-12.tmp-5"), -1);
  EXPECT_EQ(checkpoint_step_of("checkpoint-"), -1);
  EXPECT_EQ(checkpoint_step_of("checkpoint-1x"), -1);
}

// A writer process is killed with SIGKILL at random moments; afterwards every checkpoint under its final
// name loads, and the latest one is there.
TEST(RunsCheckpoint, SigkillAtRandomMomentsNeverLeavesAHalfCheckpoint) {
  TempDir tmp;
  std::mt19937 rng(1234);
  // Kill times scale with how long one write takes here (fsync speed varies a lot between machines).
  // The slowest of three writes: the first one into a fresh folder can be much faster than later ones.
  int64_t write_ms = 1;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    checkpoint_write((tmp.path / "timing").string(), state_at(1 + i), {{"m", filled({65536}, 1)}},
                     fake_adapter(1, 4096), 1);
    write_ms = std::max<int64_t>(
        write_ms,
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  }
  int64_t next_step = 1;
  int interrupted = 0;  // kills that landed inside a write (a leftover was there)
  int rounds = 0;
  // On a loaded machine (CI runs tests in parallel) the child may get little CPU: a round that completed no
  // checkpoint doubles the wait of the next ones, and rounds go on (up to 12) until one has completed.
  int64_t wait_scale = 1;
  for (int round = 0; round < 6 || (next_step == 1 && round < 12); ++round) {
    ++rounds;
    const int64_t step_before = next_step;
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Big enough (256 KiB moments) that a kill often lands inside a write. Never return into gtest.
      try {
        for (int64_t s = next_step;; ++s)
          checkpoint_write(tmp.out(), state_at(s), {{"m", filled({65536}, float(s))}},
                           fake_adapter(float(s), 4096), 2);
      } catch (...) {
      }
      _exit(1);
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(wait_scale * (write_ms / 2 + int64_t(rng() % (3 * write_ms)))));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer ended on its own (status " << status << ")";

    for (const auto& n : names_in(tmp.out())) interrupted += n.find(".tmp-") != std::string::npos;
    const auto all = checkpoint_list(tmp.out());
    for (const auto& [step, path] : all) {
      EXPECT_NO_THROW({
        const Checkpoint ck = checkpoint_load(path);
        EXPECT_EQ(ck.optimizer->get("m").ptr<float>()[0], float(step));
      }) << path;
    }
    const auto latest = checkpoint_latest(tmp.out());
    if (!all.empty()) {
      ASSERT_TRUE(latest);
      EXPECT_EQ(*latest, all.back().second);
      next_step = all.back().first + 1;
    }
    for (const auto& n : names_in(tmp.out())) EXPECT_EQ(n.find(".tmp-"), std::string::npos) << "left: " << n;
    if (next_step == step_before) wait_scale = std::min<int64_t>(wait_scale * 2, 64);
  }
  EXPECT_GT(next_step, 1) << "no checkpoint was ever completed";
  std::cout << "[ info ] one write " << write_ms << " ms; " << next_step - 1 << " checkpoints completed, "
            << interrupted << " of " << rounds << " kills inside a write\n";
}
