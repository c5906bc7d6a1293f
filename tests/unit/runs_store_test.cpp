// The experiment database: records, summaries, crash detection, concurrency, schema versions.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "deltatune/experiment_store.h"
#include "error_text.h"

namespace fs = std::filesystem;
using deltatune::Error;
using deltatune::error_of;
using deltatune::ExperimentStore;
using deltatune::SampleRecord;
using deltatune::RunRecord;
using deltatune::StepMetrics;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dt_runs_store_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string db() const { return (path / "sub" / "experiments.db").string(); }
};

// Raw SQL on the file, for what the API deliberately cannot do (tampering, holding a read snapshot).
struct RawDb {
  sqlite3* db = nullptr;
  explicit RawDb(const std::string& path) { EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK); }
  ~RawDb() { sqlite3_close(db); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "") << " in " << sql;
    sqlite3_free(err);
  }
  std::string scalar(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return out;
  }
};

RunRecord sample_run(const std::string& name) {
  RunRecord r;
  r.name = name;
  r.model = "/models/tiny";
  r.datasets = "a.jsonl,b.jsonl";
  r.config_yaml = "base_model: /models/tiny\n";
  r.output_dir = "/tmp/out/" + name;
  r.device = "cpu";
  r.total_steps = 10;
  r.tags = {"baseline"};
  return r;
}

StepMetrics step_metrics(int64_t step, double loss, double eval_loss = -1) {
  StepMetrics m;
  m.step = step;
  m.total_steps = 10;
  m.loss = loss;
  m.eval_loss = eval_loss;
  m.lr = 1e-4;
  m.tokens_seen = step * 100;
  m.wall_seconds = step * 0.5;
  if (step % 2 == 0) {  // MoE router statistics on some rows; the others keep the "not MoE" -1
    m.moe_load_max_ratio = 1.0 + 0.25 * step;
    m.moe_load_cv = 0.125 * step;
  }
  return m;
}

}  // namespace

TEST(RunsStore, FindsARunByItsOutputFolderOrACheckpointInIt) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  RunRecord a = sample_run("a"), b = sample_run("b");
  a.output_dir = b.output_dir = (tmp.path / "out").string();  // b reuses a's folder: b is the newer
  fs::create_directories(tmp.path / "out" / "checkpoint-20");
  store.create_run(a);
  const std::string idb = store.create_run(b);
  EXPECT_EQ(store.find_run((tmp.path / "out").string())->id, idb);
  EXPECT_EQ(store.find_run((tmp.path / "out" / "." / "checkpoint-20").string())->id, idb);
  EXPECT_FALSE(store.find_run((tmp.path / "sub").string()));  // a folder, but no run's
  EXPECT_FALSE(store.find_run((tmp.path / "missing").string()));
}

TEST(RunsStore, CreateFindListUpdate) {
  TempDir tmp;
  ExperimentStore store(tmp.db());  // creates the missing "sub" folder
  EXPECT_EQ(store.path(), tmp.db());
  const std::string id = store.create_run(sample_run("first"));
  EXPECT_EQ(id.size(), 8u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  const std::string id2 = store.create_run(sample_run("second"));
  EXPECT_NE(id, id2);

  auto r = store.find_run(id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->name, "first");
  EXPECT_EQ(r->status, "running");
  EXPECT_EQ(r->pid, getpid());
  EXPECT_EQ(r->engine_version, DT_VERSION);
  EXPECT_EQ(r->tags, std::vector<std::string>{"baseline"});
  EXPECT_EQ(r->created_at.size(), 24u);  // 2025-01-02T03:04:05.678Z
  EXPECT_EQ(r->created_at.back(), 'Z');

  r->status = "finished";
  r->final_loss = 1.25;
  r->notes = "good";
  r->tags = {"best"};
  store.update_run(*r);
  auto again = store.find_run("first");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, id);
  EXPECT_EQ(again->status, "finished");
  EXPECT_DOUBLE_EQ(again->final_loss, 1.25);
  EXPECT_EQ(again->notes, "good");
  EXPECT_EQ(again->tags, (std::vector<std::string>{"baseline", "best"}));  // tags are only added

  const auto all = store.list_runs();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, id2);  // newest first
  EXPECT_EQ(all[1].id, id);

  store.set_status(id2, "cancelled");
  EXPECT_FALSE(store.find_run(id2)->finished_at.empty());
  store.set_status(id2, "running");
  EXPECT_TRUE(store.find_run(id2)->finished_at.empty());
  EXPECT_NE(error_of([&] { store.set_status(id2, "done"); }).find("'done' is not valid"),
            std::string::npos);
  EXPECT_NE(error_of([&] { store.set_status("nope", "failed"); }).find("no run with id 'nope'"),
            std::string::npos);
  EXPECT_FALSE(store.find_run("zzzz"));
  EXPECT_FALSE(store.find_run(""));
}

TEST(RunsStore, FindByPrefixAndAmbiguity) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  RunRecord a = sample_run("same"), b = sample_run("same");
  a.id = "abc12345";
  b.id = "abd67890";
  store.create_run(a);
  store.create_run(b);
  EXPECT_EQ(store.find_run("abc")->id, "abc12345");
  EXPECT_EQ(store.find_run("abd6")->id, "abd67890");
  EXPECT_NE(error_of([&] { store.find_run("ab"); }).find("is a prefix of 2 runs"), std::string::npos);
  EXPECT_NE(error_of([&] { store.find_run("same"); }).find("is the name of 2 runs"), std::string::npos);
  EXPECT_FALSE(store.find_run("ab*"));
  EXPECT_NE(error_of([&] { store.create_run(a); }).find("exists"), std::string::npos);
}

TEST(RunsStore, MetricsSummaryAndTruncate) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  const std::string id = store.create_run(sample_run("m"));
  for (int s = 1; s <= 6; ++s)
    store.add_metrics(id, step_metrics(s, 3.0 - 0.1 * s, s % 3 == 0 ? 2.0 - 0.1 * s : -1));
  auto ms = store.metrics(id);
  ASSERT_EQ(ms.size(), 6u);
  EXPECT_EQ(ms[2].step, 3);
  EXPECT_DOUBLE_EQ(ms[2].loss, 2.7);
  EXPECT_EQ(ms[2].tokens_seen, 300);
  EXPECT_DOUBLE_EQ(ms[2].wall_seconds, 1.5);
  EXPECT_DOUBLE_EQ(ms[2].moe_load_max_ratio, -1);
  EXPECT_DOUBLE_EQ(ms[3].moe_load_max_ratio, 2.0);
  EXPECT_DOUBLE_EQ(ms[3].moe_load_cv, 0.5);
  auto r = store.find_run(id);
  EXPECT_EQ(r->steps, 6);
  EXPECT_DOUBLE_EQ(r->final_loss, 2.4);
  EXPECT_DOUBLE_EQ(r->best_eval_loss, 1.4);

  // Resume from the step-3 checkpoint: later rows go, the summary follows.
  store.truncate_metrics(id, 3);
  ms = store.metrics(id);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms.back().step, 3);
  r = store.find_run(id);
  EXPECT_EQ(r->steps, 3);
  EXPECT_DOUBLE_EQ(r->final_loss, 2.7);
  EXPECT_DOUBLE_EQ(r->best_eval_loss, 1.7);
  store.add_metrics(id, step_metrics(4, 2.6));
  EXPECT_EQ(store.metrics(id).size(), 4u);
  EXPECT_EQ(store.find_run(id)->steps, 4);

  EXPECT_NE(
      error_of([&] { store.add_metrics("missing", step_metrics(1, 1)); }).find("no run with id 'missing'"),
      std::string::npos);
}

TEST(RunsStore, ArtifactsEventsTagsDelete) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  const std::string id = store.create_run(sample_run("x"));
  const std::string keep = store.create_run(sample_run("y"));
  store.add_artifact({id, "checkpoint", "/out/checkpoint-20", 20, ""});
  store.add_artifact({id, "checkpoint", "/out/checkpoint-10", 10, ""});
  store.add_artifact({id, "adapter", "/out", 30, "2025-01-01T00:00:00.000Z"});
  const auto arts = store.artifacts(id);
  ASSERT_EQ(arts.size(), 3u);
  EXPECT_EQ(arts[0].path, "/out/checkpoint-10");  // by step
  EXPECT_EQ(arts[2].kind, "adapter");
  EXPECT_EQ(arts[2].created_at, "2025-01-01T00:00:00.000Z");
  EXPECT_FALSE(arts[0].created_at.empty());

  store.add_event(id, "info", "started");
  store.add_event(id, "warning", "row 3 skipped: \"bad\" json");
  const auto ev = store.events(id);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].level, "warning");
  EXPECT_EQ(ev[1].message, "row 3 skipped: \"bad\" json");

  store.add_tag(id, "zeta");
  store.add_tag(id, "zeta");  // idempotent
  store.add_tag(id, "alpha");
  EXPECT_EQ(store.find_run(id)->tags, (std::vector<std::string>{"alpha", "baseline", "zeta"}));
  EXPECT_THROW(store.add_tag("missing", "t"), Error);
  EXPECT_THROW(store.add_tag(id, ""), Error);

  store.add_metrics(id, step_metrics(1, 1.0));
  store.delete_run(id);
  EXPECT_FALSE(store.find_run(id));
  EXPECT_TRUE(store.metrics(id).empty());
  EXPECT_TRUE(store.artifacts(id).empty());
  EXPECT_TRUE(store.events(id).empty());
  EXPECT_TRUE(store.find_run(keep));
  RawDb raw(tmp.db());
  EXPECT_EQ(raw.scalar("SELECT COUNT(*) FROM tags WHERE run_id = '" + id + "'"), "0");
  EXPECT_THROW(store.delete_run(id), Error);
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(RunsStore, MarkCrashedRuns) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: the pid now names no process

  RunRecord dead = sample_run("dead");
  dead.pid = child;
  const std::string dead_id = store.create_run(dead);
  const std::string alive_id = store.create_run(sample_run("alive"));  // this process
  RunRecord done = sample_run("done");
  done.pid = child;
  done.status = "finished";
  const std::string done_id = store.create_run(done);
  const std::string rebooted_id = store.create_run(sample_run("rebooted"));
  const std::string reused_id = store.create_run(sample_run("reused"));
  const std::string remote_id = store.create_run(sample_run("remote"));
  {
    RawDb raw(tmp.db());
    // Same pid (ours, alive), but recorded in an earlier boot / by a process that started at another time /
    // on another machine.
    raw.exec("UPDATE runs SET boot_id = 'another-boot' WHERE id = '" + rebooted_id + "'");
    raw.exec("UPDATE runs SET pid_start = '1' WHERE id = '" + reused_id + "'");
    raw.exec("UPDATE runs SET host = 'another-host', pid = " + std::to_string(child) + " WHERE id = '" +
             remote_id + "'");
  }
  EXPECT_EQ(store.mark_crashed_runs(), 3);
  EXPECT_EQ(store.find_run(dead_id)->status, "crashed");
  EXPECT_FALSE(store.find_run(dead_id)->finished_at.empty());
  EXPECT_EQ(store.find_run(alive_id)->status, "running");
  EXPECT_EQ(store.find_run(done_id)->status, "finished");
  EXPECT_EQ(store.find_run(rebooted_id)->status, "crashed");
  EXPECT_EQ(store.find_run(reused_id)->status, "crashed");
  EXPECT_EQ(store.find_run(remote_id)->status, "running");  // cannot tell from here: left alone
  const auto ev = store.events(dead_id);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].message.find("process " + std::to_string(child)), std::string::npos);
  EXPECT_EQ(store.mark_crashed_runs(), 0);

  // Resumed by a live process: running again, owned by this process.
  auto r = *store.find_run(dead_id);
  r.status = "running";
  r.pid = getpid();
  store.update_run(r);
  EXPECT_EQ(store.mark_crashed_runs(), 0);
  EXPECT_EQ(store.find_run(dead_id)->status, "running");
}

TEST(RunsStore, ReadersDoNotBlockTheWriter) {
  TempDir tmp;
  ExperimentStore writer_store(tmp.db());
  const std::string id = writer_store.create_run(sample_run("busy"));

  // A reader holding an open read transaction (a snapshot) must not stop commits: WAL.
  RawDb holder(tmp.db());
  holder.exec("BEGIN");
  EXPECT_EQ(holder.scalar("SELECT COUNT(*) FROM metrics"), "0");
  const auto t0 = std::chrono::steady_clock::now();
  writer_store.add_metrics(id, step_metrics(1, 1.0));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));  // far below busy_timeout
  EXPECT_EQ(holder.scalar("SELECT COUNT(*) FROM metrics"), "0");              // its snapshot is unchanged
  holder.exec("COMMIT");
  EXPECT_EQ(holder.scalar("SELECT COUNT(*) FROM metrics"), "1");
  EXPECT_EQ(holder.scalar("PRAGMA journal_mode"), "wal");

  // Writer thread vs a polling reader on its own connection.
  constexpr int kSteps = 200;
  std::atomic<bool> writer_done{false};
  std::string writer_error;
  std::thread writer([&] {
    try {
      for (int s = 2; s <= kSteps; ++s) {
        writer_store.add_metrics(id, step_metrics(s, 1.0 / s));
        if (s % 20 == 0) writer_store.add_event(id, "info", "step " + std::to_string(s));
      }
    } catch (const std::exception& e) {
      writer_error = e.what();
    }
    writer_done = true;
  });
  ExperimentStore reader(tmp.db());
  size_t last = 0;
  int polls = 0;
  while (!writer_done || polls == 0) {
    const auto ms = reader.metrics(id);
    EXPECT_GE(ms.size(), last);  // never goes back: every read sees a committed state
    for (size_t i = 1; i < ms.size(); ++i) ASSERT_EQ(ms[i].step, ms[i - 1].step + 1);
    last = ms.size();
    const auto r = reader.find_run(id);
    ASSERT_TRUE(r);
    EXPECT_LE(static_cast<size_t>(r->steps), static_cast<size_t>(kSteps));
    ++polls;
  }
  writer.join();
  EXPECT_EQ(writer_error, "");
  EXPECT_EQ(reader.metrics(id).size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(reader.find_run(id)->steps, kSteps);
  EXPECT_GT(polls, 0);
  EXPECT_EQ(reader.integrity_check(), "ok");
}

TEST(RunsStore, SchemaVersionAndBadFiles) {
  TempDir tmp;
  {
    ExperimentStore store(tmp.db());
    store.create_run(sample_run("kept"));
  }
  {
    ExperimentStore reopened(tmp.db());  // no second migration, data kept
    EXPECT_EQ(reopened.list_runs().size(), 1u);
    RawDb raw(tmp.db());
    EXPECT_EQ(raw.scalar("SELECT COUNT(*) FROM schema_version"), "3");
    EXPECT_EQ(raw.scalar("SELECT MAX(version) FROM schema_version"), "3");
    raw.exec("INSERT INTO schema_version(version) VALUES (99)");
  }
  EXPECT_NE(error_of([&] { ExperimentStore s(tmp.db()); }).find("schema version 99, newer than"),
            std::string::npos);

  const std::string junk = (tmp.path / "junk.db").string();
  std::ofstream(junk) << std::string(4096, 'x');
  const std::string msg = error_of([&] { ExperimentStore s(junk); });
  EXPECT_NE(msg.find(junk), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a database"), std::string::npos) << msg;
}

// sample_prompts generations: stored per run, step and prompt (a step written again replaces its rows), listed in
// step order, dropped after the resume step by truncate_metrics and with the run.
TEST(RunsStore, SamplesPerRunAndStep) {
  TempDir tmp;
  ExperimentStore store(tmp.db());
  const std::string a = store.create_run(sample_run("a")), b = store.create_run(sample_run("b"));
  auto rec = [](int64_t step, int64_t i, const std::string& text) {
    SampleRecord r;
    r.step = step;
    r.prompt_index = i;
    r.prompt = R"([{"role":"user","content":"q)" + std::to_string(i) + R"("}])";
    r.text = text;
    r.tokens = static_cast<int64_t>(text.size());
    r.finish_reason = "length";
    return r;
  };
  store.add_samples(a, {rec(4, 0, "a4-0"), rec(4, 1, "a4-1")});
  store.add_samples(a, {rec(2, 0, "a2-0"), rec(2, 1, "a2-1")});
  store.add_samples(b, {rec(2, 0, "b2-0")});
  store.add_samples(a, {rec(4, 1, "a4-1 again")});
  const auto sa = store.samples(a);
  ASSERT_EQ(sa.size(), 4u);
  EXPECT_EQ(sa[0].text, "a2-0");
  EXPECT_EQ(sa[1].text, "a2-1");
  EXPECT_EQ(sa[2].text, "a4-0");
  EXPECT_EQ(sa[3].text, "a4-1 again");
  EXPECT_EQ(sa[3].step, 4);
  EXPECT_EQ(sa[3].prompt, R"([{"role":"user","content":"q1"}])");
  EXPECT_EQ(sa[3].finish_reason, "length");
  EXPECT_EQ(sa[3].tokens, 10);
  EXPECT_FALSE(sa[3].created_at.empty());
  EXPECT_NE(error_of([&] { store.add_samples("nope", {rec(1, 0, "x")}); }).find("nope"), std::string::npos);
  store.truncate_metrics(a, 3);  // a resume from step 3
  ASSERT_EQ(store.samples(a).size(), 2u);
  EXPECT_EQ(store.samples(a)[1].text, "a2-1");
  store.delete_run(a);
  EXPECT_TRUE(store.samples(a).empty());
  EXPECT_EQ(store.samples(b).size(), 1u);
}

// A database written before the samples table (schema version 2) opens: its runs and metrics read as before,
// it gains the table (no samples), and new samples can be stored.
TEST(RunsStore, DatabaseOfSchemaVersion2StillReads) {
  TempDir tmp;
  fs::create_directories(fs::path(tmp.db()).parent_path());
  {
    RawDb raw(tmp.db());
    // The schema as version 2 left it (the tables the version-2 migrations made, as they were released).
    raw.exec(R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, created_at TEXT NOT NULL,
  finished_at TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', datasets TEXT NOT NULL DEFAULT '',
  config_yaml TEXT NOT NULL DEFAULT '', output_dir TEXT NOT NULL DEFAULT '', engine_version TEXT NOT NULL DEFAULT '',
  device TEXT NOT NULL DEFAULT '', final_loss REAL NOT NULL DEFAULT -1, best_eval_loss REAL NOT NULL DEFAULT -1,
  steps INTEGER NOT NULL DEFAULT 0, total_steps INTEGER NOT NULL DEFAULT 0, pid INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '', boot_id TEXT NOT NULL DEFAULT '', pid_start TEXT NOT NULL DEFAULT '',
  notes TEXT NOT NULL DEFAULT '');
CREATE INDEX runs_by_name ON runs(name);
CREATE INDEX runs_by_status ON runs(status);
CREATE TABLE metrics (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  total_steps INTEGER NOT NULL, epoch REAL NOT NULL, loss REAL NOT NULL, eval_loss REAL NOT NULL, lr REAL NOT NULL,
  grad_norm REAL NOT NULL, tokens_per_second REAL NOT NULL, tokens_seen INTEGER NOT NULL,
  trained_tokens INTEGER NOT NULL, vram_allocated INTEGER NOT NULL, vram_reserved INTEGER NOT NULL,
  wall_seconds REAL NOT NULL);
CREATE INDEX metrics_by_run_step ON metrics(run_id, step);
CREATE TABLE artifacts (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL, path TEXT NOT NULL, step INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX artifacts_by_run ON artifacts(run_id);
CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX events_by_run ON events(run_id);
CREATE TABLE tags (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)) WITHOUT ROWID;
ALTER TABLE metrics ADD COLUMN moe_load_max_ratio REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN moe_load_cv REAL NOT NULL DEFAULT -1;
INSERT INTO schema_version(version) VALUES (1), (2);
INSERT INTO runs(id, name, status, created_at, steps, final_loss) VALUES ('r0ld', 'old run', 'finished',
  '2026-01-01T00:00:00.000Z', 1, 2.5);
INSERT INTO metrics VALUES ('r0ld', 1, 1, 0.5, 2.5, -1, 0.001, 1.0, 100, 64, 32, 0, 0, 1.5, -1, -1);
)sql");
  }
  ExperimentStore store(tmp.db());
  const auto run = store.find_run("old run");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->id, "r0ld");
  EXPECT_EQ(run->status, "finished");
  ASSERT_EQ(store.metrics("r0ld").size(), 1u);
  EXPECT_DOUBLE_EQ(store.metrics("r0ld")[0].loss, 2.5);
  EXPECT_TRUE(store.samples("r0ld").empty());
  SampleRecord r;
  r.step = 1;
  r.prompt = "[]";
  r.text = "hello";
  store.add_samples("r0ld", {r});
  EXPECT_EQ(store.samples("r0ld").size(), 1u);
  RawDb raw(tmp.db());
  EXPECT_EQ(raw.scalar("SELECT MAX(version) FROM schema_version"), "3");
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(RunsStore, DefaultPath) {
  TempDir tmp;
  const char* old_db = std::getenv("DELTATUNE_DB");
  const char* old_xdg = std::getenv("XDG_DATA_HOME");
  const std::string saved_db = old_db ? old_db : "", saved_xdg = old_xdg ? old_xdg : "";

  setenv("DELTATUNE_DB", (tmp.path / "a" / "x.db").c_str(), 1);
  EXPECT_EQ(ExperimentStore::default_path(), (tmp.path / "a" / "x.db").string());
  EXPECT_TRUE(fs::is_directory(tmp.path / "a"));
  unsetenv("DELTATUNE_DB");
  setenv("XDG_DATA_HOME", (tmp.path / "xdg").c_str(), 1);
  EXPECT_EQ(ExperimentStore::default_path(), (tmp.path / "xdg" / "deltatune" / "experiments.db").string());
  EXPECT_TRUE(fs::is_directory(tmp.path / "xdg" / "deltatune"));

  if (old_db) setenv("DELTATUNE_DB", saved_db.c_str(), 1);
  if (old_xdg)
    setenv("XDG_DATA_HOME", saved_xdg.c_str(), 1);
  else
    unsetenv("XDG_DATA_HOME");
}
