// The experiment database. One connection per ExperimentStore; WAL lets readers on other connections
// (studio, CLI) read while the trainer writes. The runs row carries a summary (steps, final loss, best eval)
// kept current by add_metrics / truncate_metrics, so listing runs never scans the metrics table.
#include "deltatune/experiment_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>

#include "core/error.h"
#include "store/process_identity.h"
#include "store/sqlite.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

constexpr int kBusyTimeoutMs = 10000;

// migrations[i] takes the schema from version i to i + 1. Append only; never edit a released one.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL,
  created_at TEXT NOT NULL,
  finished_at TEXT NOT NULL DEFAULT '',
  model TEXT NOT NULL DEFAULT '',
  datasets TEXT NOT NULL DEFAULT '',
  config_yaml TEXT NOT NULL DEFAULT '',
  output_dir TEXT NOT NULL DEFAULT '',
  engine_version TEXT NOT NULL DEFAULT '',
  device TEXT NOT NULL DEFAULT '',
  final_loss REAL NOT NULL DEFAULT -1,
  best_eval_loss REAL NOT NULL DEFAULT -1,
  steps INTEGER NOT NULL DEFAULT 0,
  total_steps INTEGER NOT NULL DEFAULT 0,
  pid INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '',
  boot_id TEXT NOT NULL DEFAULT '',
  pid_start TEXT NOT NULL DEFAULT '',
  notes TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_name ON runs(name);
CREATE INDEX runs_by_status ON runs(status);
CREATE TABLE metrics (
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  total_steps INTEGER NOT NULL,
  epoch REAL NOT NULL,
  loss REAL NOT NULL,
  eval_loss REAL NOT NULL,
  lr REAL NOT NULL,
  grad_norm REAL NOT NULL,
  tokens_per_second REAL NOT NULL,
  tokens_seen INTEGER NOT NULL,
  trained_tokens INTEGER NOT NULL,
  vram_allocated INTEGER NOT NULL,
  vram_reserved INTEGER NOT NULL,
  wall_seconds REAL NOT NULL
);
CREATE INDEX metrics_by_run_step ON metrics(run_id, step);
CREATE TABLE artifacts (
  id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  path TEXT NOT NULL,
  step INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX artifacts_by_run ON artifacts(run_id);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time TEXT NOT NULL,
  level TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_by_run ON events(run_id);
CREATE TABLE tags (
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
)sql",
    // 1 -> 2: MoE router load-balance metrics (-1 for dense models and older rows).
    R"sql(
ALTER TABLE metrics ADD COLUMN moe_load_max_ratio REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN moe_load_cv REAL NOT NULL DEFAULT -1;
)sql",
    // 2 -> 3: generations of the run config's sample_prompts at eval steps (older databases: none).
    R"sql(
CREATE TABLE samples (
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  prompt_index INTEGER NOT NULL,
  prompt TEXT NOT NULL,
  text TEXT NOT NULL,
  tokens INTEGER NOT NULL,
  finish_reason TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (run_id, step, prompt_index)
);
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(sizeof kMigrations / sizeof kMigrations[0]);

const char* const kStatuses[] = {"running", "finished", "failed", "cancelled", "crashed"};

std::string now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void check_status(const std::string& status) {
  for (const char* s : kStatuses)
    if (status == s) return;
  throw Error("run status '" + status +
              "' is not valid (expected running, finished, failed, cancelled or crashed)");
}

bool is_terminal(const std::string& status) {
  return status != "running";
}

std::string random_id() {
  std::random_device rd;
  const uint32_t v = rd();
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Columns of runs in the order read_run expects.
constexpr const char* kRunColumns =
    "id, name, status, created_at, finished_at, model, datasets, config_yaml, output_dir, engine_version, "
    "device, final_loss, best_eval_loss, steps, total_steps, pid, notes";

RunRecord read_run(const SqliteStmt& s) {
  RunRecord r;
  r.id = s.text(0);
  r.name = s.text(1);
  r.status = s.text(2);
  r.created_at = s.text(3);
  r.finished_at = s.text(4);
  r.model = s.text(5);
  r.datasets = s.text(6);
  r.config_yaml = s.text(7);
  r.output_dir = s.text(8);
  r.engine_version = s.text(9);
  r.device = s.text(10);
  r.final_loss = s.real(11);
  r.best_eval_loss = s.real(12);
  r.steps = s.integer(13);
  r.total_steps = s.integer(14);
  r.pid = s.integer(15);
  r.notes = s.text(16);
  return r;
}

}  // namespace

struct ExperimentStore::Impl {
  std::mutex mutex;  // one connection, many threads: statements of one call must not interleave
  SqliteDb db;
  explicit Impl(const std::string& path) : db(path, kBusyTimeoutMs) {}

  bool run_exists(const std::string& id) {
    SqliteStmt s(db, "SELECT 1 FROM runs WHERE id = ?");
    s.bind(1, id);
    return s.step();
  }

  void require_run(const std::string& id) {
    check(run_exists(id), "experiment database '" + db.path() + "': no run with id '" + id + "'");
  }

  std::vector<std::string> tags_of(const std::string& id) {
    SqliteStmt s(db, "SELECT tag FROM tags WHERE run_id = ? ORDER BY tag");
    s.bind(1, id);
    std::vector<std::string> out;
    while (s.step()) out.push_back(s.text(0));
    return out;
  }

  void insert_tags(const std::string& id, const std::vector<std::string>& tags) {
    SqliteStmt s(db, "INSERT OR IGNORE INTO tags(run_id, tag) VALUES (?, ?)");
    for (const auto& t : tags) {
      check(!t.empty(), "experiment database: a tag must not be empty");
      s.reset();
      s.bind(1, id).bind(2, t).run();
    }
  }

  // The runs row's summary after the metrics of a run changed.
  void refresh_summary(const std::string& id) {
    SqliteStmt s(db,
                 "UPDATE runs SET "
                 " steps = COALESCE((SELECT MAX(step) FROM metrics WHERE run_id = ?1), 0),"
                 " final_loss = COALESCE((SELECT loss FROM metrics WHERE run_id = ?1"
                 "                        ORDER BY step DESC, rowid DESC LIMIT 1), -1),"
                 " best_eval_loss = COALESCE((SELECT MIN(eval_loss) FROM metrics"
                 "                            WHERE run_id = ?1 AND eval_loss >= 0), -1),"
                 " total_steps = COALESCE((SELECT total_steps FROM metrics WHERE run_id = ?1"
                 "                         ORDER BY step DESC, rowid DESC LIMIT 1), total_steps)"
                 " WHERE id = ?1");
    s.bind(1, id).run();
  }

  void migrate() {
    // WAL must be switched outside a transaction; it persists in the file.
    {
      SqliteStmt s(db, "PRAGMA journal_mode=WAL");
      s.step();
    }
    db.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
    SqliteTransaction tx(db);
    db.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
    int version = 0;
    {
      SqliteStmt s(db, "SELECT COALESCE(MAX(version), 0) FROM schema_version");
      if (s.step()) version = static_cast<int>(s.integer(0));
    }
    check(version <= kSchemaVersion, "experiment database '" + db.path() + "' has schema version " +
                                         std::to_string(version) +
                                         ", newer than this DeltaTune understands (" +
                                         std::to_string(kSchemaVersion) + "); use a newer DeltaTune");
    for (int v = version; v < kSchemaVersion; ++v) {
      db.exec(kMigrations[v]);
      SqliteStmt s(db, "INSERT INTO schema_version(version) VALUES (?)");
      s.bind(1, v + 1).run();
    }
    tx.commit();
  }
};

ExperimentStore::ExperimentStore(const std::string& path) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && path != ":memory:") fs::create_directories(parent, ec);
  impl_ = std::make_unique<Impl>(path);
  impl_->migrate();
}

ExperimentStore::~ExperimentStore() = default;

std::string ExperimentStore::default_path() {
  fs::path p;
  if (const char* env = std::getenv("DELTATUNE_DB"); env && *env) {
    p = env;
  } else if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg && fs::path(xdg).is_absolute()) {
    p = fs::path(xdg) / "deltatune" / "experiments.db";
  } else {
    const char* home = std::getenv("HOME");
    check(home && *home, "cannot find the experiment database: set DELTATUNE_DB, XDG_DATA_HOME or HOME");
    p = fs::path(home) / ".local" / "share" / "deltatune" / "experiments.db";
  }
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  check(!ec, "cannot create the folder of the experiment database '" + p.string() + "': " + ec.message());
  return p.string();
}

const std::string& ExperimentStore::path() const {
  return impl_->db.path();
}

std::string ExperimentStore::create_run(const RunRecord& r) {
  std::lock_guard lock(impl_->mutex);
  const std::string status = r.status.empty() ? "running" : r.status;
  check_status(status);
  SqliteTransaction tx(impl_->db);
  std::string id = r.id;
  if (id.empty()) {
    // 32 random bits: a clash is rare, and the check makes it harmless.
    do id = random_id();
    while (impl_->run_exists(id));
  } else {
    check(!impl_->run_exists(id), "experiment database '" + path() + "': a run with id '" + id + "' exists");
  }
  const int64_t pid = r.pid > 0 ? r.pid : static_cast<int64_t>(getpid());
  SqliteStmt s(
      impl_->db,
      "INSERT INTO runs(id, name, status, created_at, finished_at, model, datasets, config_yaml, "
      "output_dir, engine_version, device, final_loss, best_eval_loss, steps, total_steps, pid, host, "
      "boot_id, pid_start, notes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  s.bind(1, id).bind(2, r.name).bind(3, status).bind(4, r.created_at.empty() ? now_iso() : r.created_at);
  s.bind(5, r.finished_at).bind(6, r.model).bind(7, r.datasets).bind(8, r.config_yaml).bind(9, r.output_dir);
  s.bind(10, r.engine_version.empty() ? std::string(DT_VERSION) : r.engine_version).bind(11, r.device);
  s.bind(12, r.final_loss).bind(13, r.best_eval_loss).bind(14, r.steps).bind(15, r.total_steps).bind(16, pid);
  s.bind(17, host_id()).bind(18, boot_id()).bind(19, process_start_time(pid)).bind(20, r.notes);
  s.run();
  impl_->insert_tags(id, r.tags);
  tx.commit();
  return id;
}

void ExperimentStore::update_run(const RunRecord& r) {
  std::lock_guard lock(impl_->mutex);
  check_status(r.status);
  SqliteTransaction tx(impl_->db);
  int64_t old_pid = 0;
  {
    SqliteStmt s(impl_->db, "SELECT pid FROM runs WHERE id = ?");
    s.bind(1, r.id);
    check(s.step(), "experiment database '" + path() + "': no run with id '" + r.id + "'");
    old_pid = s.integer(0);
  }
  SqliteStmt s(
      impl_->db,
      "UPDATE runs SET name=?, status=?, created_at=?, finished_at=?, model=?, datasets=?, config_yaml=?, "
      "output_dir=?, engine_version=?, device=?, final_loss=?, best_eval_loss=?, steps=?, total_steps=?, "
      "notes=? WHERE id=?");
  s.bind(1, r.name).bind(2, r.status).bind(3, r.created_at).bind(4, r.finished_at).bind(5, r.model);
  s.bind(6, r.datasets).bind(7, r.config_yaml).bind(8, r.output_dir).bind(9, r.engine_version);
  s.bind(10, r.device).bind(11, r.final_loss).bind(12, r.best_eval_loss).bind(13, r.steps);
  s.bind(14, r.total_steps).bind(15, r.notes).bind(16, r.id).run();
  if (r.pid > 0 && r.pid != old_pid) {
    // A resumed run belongs to a new process: record who owns it now.
    SqliteStmt p(impl_->db, "UPDATE runs SET pid=?, host=?, boot_id=?, pid_start=? WHERE id=?");
    p.bind(1, r.pid)
        .bind(2, host_id())
        .bind(3, boot_id())
        .bind(4, process_start_time(r.pid))
        .bind(5, r.id)
        .run();
  }
  impl_->insert_tags(r.id, r.tags);
  tx.commit();
}

void ExperimentStore::set_status(const std::string& run_id, const std::string& status) {
  std::lock_guard lock(impl_->mutex);
  check_status(status);
  SqliteStmt s(impl_->db, "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?");
  s.bind(1, status).bind(2, is_terminal(status) ? now_iso() : std::string()).bind(3, run_id).run();
  check(impl_->db.changes() == 1, "experiment database '" + path() + "': no run with id '" + run_id + "'");
}

std::optional<RunRecord> ExperimentStore::find_run(const std::string& id_or_name) {
  std::lock_guard lock(impl_->mutex);
  if (id_or_name.empty()) return std::nullopt;
  auto query = [&](const std::string& where, const std::string& arg) {
    SqliteStmt s(impl_->db, std::string("SELECT ") + kRunColumns + " FROM runs WHERE " + where +
                                " ORDER BY created_at DESC, rowid DESC");
    s.bind(1, arg);
    std::vector<RunRecord> out;
    while (s.step()) out.push_back(read_run(s));
    return out;
  };
  auto one = [&](std::vector<RunRecord> found, const std::string& what) -> std::optional<RunRecord> {
    if (found.empty()) return std::nullopt;
    if (found.size() > 1) {
      std::string ids;
      for (const auto& r : found) ids += (ids.empty() ? "" : ", ") + r.id;
      throw Error("'" + id_or_name + "' " + what + " " + std::to_string(found.size()) + " runs (" + ids +
                  "); use a longer id");
    }
    found[0].tags = impl_->tags_of(found[0].id);
    return found[0];
  };
  if (auto r = one(query("id = ?", id_or_name), "matches")) return r;
  if (auto r = one(query("name = ?", id_or_name), "is the name of")) return r;
  // Prefix match on ids; GLOB keeps it case-sensitive and the id alphabet has no wildcard characters.
  if (id_or_name.find_first_of("*?[]") == std::string::npos)
    if (auto r = one(query("id GLOB ?", id_or_name + "*"), "is a prefix of")) return r;
  // A run's output folder, or one of its checkpoint folders: the newest run written there.
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(id_or_name, ec), ec);
  if (ec || !fs::is_directory(dir, ec)) return std::nullopt;
  const auto runs = query("output_dir <> ?", "");  // newest first
  for (int up = 0; up < 2; ++up, dir = dir.parent_path())
    for (const auto& r : runs)
      if (fs::weakly_canonical(fs::path(r.output_dir), ec) == dir && !ec) {
        RunRecord found = r;
        found.tags = impl_->tags_of(found.id);
        return found;
      }
  return std::nullopt;
}

std::vector<RunRecord> ExperimentStore::list_runs() {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(impl_->db,
               std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY created_at DESC, rowid DESC");
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s));
  for (auto& r : out) r.tags = impl_->tags_of(r.id);
  return out;
}

void ExperimentStore::delete_run(const std::string& run_id) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(run_id);
  // Foreign keys cascade to metrics, artifacts, events and tags.
  SqliteStmt s(impl_->db, "DELETE FROM runs WHERE id = ?");
  s.bind(1, run_id).run();
  tx.commit();
}

void ExperimentStore::add_tag(const std::string& run_id, const std::string& tag) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(run_id);
  impl_->insert_tags(run_id, {tag});
  tx.commit();
}

int ExperimentStore::mark_crashed_runs() {
  std::lock_guard lock(impl_->mutex);
  struct Candidate {
    std::string id, host, boot, start;
    int64_t pid;
  };
  std::vector<Candidate> running;
  {
    SqliteStmt s(impl_->db, "SELECT id, pid, host, boot_id, pid_start FROM runs WHERE status = 'running'");
    while (s.step()) running.push_back({s.text(0), s.text(2), s.text(3), s.text(4), s.integer(1)});
  }
  int marked = 0;
  for (const auto& c : running) {
    if (process_state(c.pid, c.host, c.boot, c.start) != ProcessState::Dead) continue;
    SqliteTransaction tx(impl_->db);
    // Guarded by status and pid: the run may have finished, or been resumed by a new process, meanwhile.
    SqliteStmt s(impl_->db,
                 "UPDATE runs SET status = 'crashed', finished_at = ? WHERE id = ? AND status = 'running' "
                 "AND pid = ?");
    s.bind(1, now_iso()).bind(2, c.id).bind(3, c.pid).run();
    if (impl_->db.changes() == 1) {
      SqliteStmt e(impl_->db, "INSERT INTO events(run_id, time, level, message) VALUES (?, ?, 'error', ?)");
      e.bind(1, c.id)
          .bind(2, now_iso())
          .bind(3, "process " + std::to_string(c.pid) +
                       " ended without finishing the run; marked crashed (resumable "
                       "from its last checkpoint)")
          .run();
      ++marked;
    }
    tx.commit();
  }
  return marked;
}

RunRecord ExperimentStore::claim_run(const std::string& run_id, int64_t pid) {
  std::lock_guard lock(impl_->mutex);
  // BEGIN IMMEDIATE takes the write lock before the read: a second claimer waits here and then sees
  // this one's `running`.
  SqliteTransaction tx(impl_->db);
  RunRecord before;
  std::string host, boot, start;
  {
    SqliteStmt s(impl_->db, std::string("SELECT ") + kRunColumns + ", host, boot_id, pid_start FROM runs WHERE id = ?");
    s.bind(1, run_id);
    check(s.step(), "experiment database '" + path() + "': no run with id '" + run_id + "'");
    before = read_run(s);
    host = s.text(17);
    boot = s.text(18);
    start = s.text(19);
  }
  check(before.status != "finished", "--resume: run " + run_id + " already finished; nothing to resume");
  if (before.status == "running") {
    const ProcessState ps = process_state(before.pid, host, boot, start);
    check(ps == ProcessState::Dead,
          "--resume: run " + run_id + " is still running (pid " + std::to_string(before.pid) +
              (ps == ProcessState::Unknown ? " on another machine" : "") +
              "); stop it first, or wait for it to end");
    before.status = "crashed";  // its process is gone: what it is put back to if this resume fails
  }
  SqliteStmt u(impl_->db,
               "UPDATE runs SET status = 'running', finished_at = '', pid = ?, host = ?, boot_id = ?, "
               "pid_start = ? WHERE id = ?");
  u.bind(1, pid).bind(2, host_id()).bind(3, boot_id()).bind(4, process_start_time(pid)).bind(5, run_id).run();
  tx.commit();
  before.tags = impl_->tags_of(run_id);
  return before;
}

bool ExperimentStore::release_run(const RunRecord& before, int64_t pid) {
  std::lock_guard lock(impl_->mutex);
  check_status(before.status);
  SqliteStmt s(impl_->db,
               "UPDATE runs SET status = ?, finished_at = ? WHERE id = ? AND status = 'running' AND pid = ?");
  s.bind(1, before.status).bind(2, before.finished_at).bind(3, before.id).bind(4, pid).run();
  return impl_->db.changes() == 1;
}

void ExperimentStore::add_metrics(const std::string& run_id, const StepMetrics& m) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  SqliteStmt s(impl_->db,
               "INSERT INTO metrics(run_id, step, total_steps, epoch, loss, eval_loss, lr, grad_norm, "
               "tokens_per_second, tokens_seen, trained_tokens, vram_allocated, vram_reserved, wall_seconds, "
               "moe_load_max_ratio, moe_load_cv) "
               "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  s.bind(1, run_id)
      .bind(2, m.step)
      .bind(3, m.total_steps)
      .bind(4, m.epoch)
      .bind(5, m.loss)
      .bind(6, m.eval_loss);
  s.bind(7, m.lr).bind(8, m.grad_norm).bind(9, m.tokens_per_second).bind(10, m.tokens_seen);
  s.bind(11, m.trained_tokens).bind(12, m.vram_allocated).bind(13, m.vram_reserved).bind(14, m.wall_seconds);
  s.bind(15, m.moe_load_max_ratio).bind(16, m.moe_load_cv);
  try {
    s.run();
  } catch (const Error&) {
    impl_->require_run(run_id);  // a clearer message when the run does not exist
    throw;
  }
  // Cheap incremental summary; the full recomputation is only needed when rows go away.
  SqliteStmt u(impl_->db,
               "UPDATE runs SET "
               " final_loss = CASE WHEN ?2 >= steps THEN ?3 ELSE final_loss END,"
               " total_steps = CASE WHEN ?2 >= steps THEN ?4 ELSE total_steps END,"
               " steps = MAX(steps, ?2),"
               " best_eval_loss = CASE WHEN ?5 >= 0 AND (best_eval_loss < 0 OR ?5 < best_eval_loss) THEN ?5"
               "                  ELSE best_eval_loss END"
               " WHERE id = ?1");
  u.bind(1, run_id).bind(2, m.step).bind(3, m.loss).bind(4, m.total_steps).bind(5, m.eval_loss).run();
  tx.commit();
}

std::vector<StepMetrics> ExperimentStore::metrics(const std::string& run_id) {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(
      impl_->db,
      "SELECT step, total_steps, epoch, loss, eval_loss, lr, grad_norm, tokens_per_second, tokens_seen, "
      "trained_tokens, vram_allocated, vram_reserved, wall_seconds, moe_load_max_ratio, moe_load_cv "
      "FROM metrics WHERE run_id = ? "
      "ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<StepMetrics> out;
  while (s.step()) {
    StepMetrics m;
    m.step = s.integer(0);
    m.total_steps = s.integer(1);
    m.epoch = s.real(2);
    m.loss = s.real(3);
    m.eval_loss = s.real(4);
    m.lr = s.real(5);
    m.grad_norm = s.real(6);
    m.tokens_per_second = s.real(7);
    m.tokens_seen = s.integer(8);
    m.trained_tokens = s.integer(9);
    m.vram_allocated = s.integer(10);
    m.vram_reserved = s.integer(11);
    m.wall_seconds = s.real(12);
    m.moe_load_max_ratio = s.real(13);
    m.moe_load_cv = s.real(14);
    out.push_back(m);
  }
  return out;
}

void ExperimentStore::truncate_metrics(const std::string& run_id, int64_t step) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(run_id);
  SqliteStmt s(impl_->db, "DELETE FROM metrics WHERE run_id = ? AND step > ?");
  s.bind(1, run_id).bind(2, step).run();
  SqliteStmt sm(impl_->db, "DELETE FROM samples WHERE run_id = ? AND step > ?");
  sm.bind(1, run_id).bind(2, step).run();
  impl_->refresh_summary(run_id);
  tx.commit();
}

void ExperimentStore::add_artifact(const ArtifactRecord& a) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(a.run_id);
  SqliteStmt s(impl_->db, "INSERT INTO artifacts(run_id, kind, path, step, created_at) VALUES (?,?,?,?,?)");
  s.bind(1, a.run_id)
      .bind(2, a.kind)
      .bind(3, a.path)
      .bind(4, a.step)
      .bind(5, a.created_at.empty() ? now_iso() : a.created_at)
      .run();
  tx.commit();
}

std::vector<ArtifactRecord> ExperimentStore::artifacts(const std::string& run_id) {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(
      impl_->db,
      "SELECT run_id, kind, path, step, created_at FROM artifacts WHERE run_id = ? ORDER BY step, id");
  s.bind(1, run_id);
  std::vector<ArtifactRecord> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.integer(3), s.text(4)});
  return out;
}

void ExperimentStore::add_samples(const std::string& run_id, const std::vector<SampleRecord>& samples) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(run_id);
  for (const SampleRecord& r : samples) {
    SqliteStmt s(impl_->db,
                 "INSERT OR REPLACE INTO samples(run_id, step, prompt_index, prompt, text, tokens, finish_reason, "
                 "created_at) VALUES (?,?,?,?,?,?,?,?)");
    s.bind(1, run_id)
        .bind(2, r.step)
        .bind(3, r.prompt_index)
        .bind(4, r.prompt)
        .bind(5, r.text)
        .bind(6, r.tokens)
        .bind(7, r.finish_reason)
        .bind(8, r.created_at.empty() ? now_iso() : r.created_at)
        .run();
  }
  tx.commit();
}

std::vector<SampleRecord> ExperimentStore::samples(const std::string& run_id) {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(impl_->db,
               "SELECT run_id, step, prompt_index, prompt, text, tokens, finish_reason, created_at FROM samples "
               "WHERE run_id = ? ORDER BY step, prompt_index");
  s.bind(1, run_id);
  std::vector<SampleRecord> out;
  while (s.step())
    out.push_back({s.text(0), s.integer(1), s.integer(2), s.text(3), s.text(4), s.integer(5), s.text(6), s.text(7)});
  return out;
}

void ExperimentStore::add_event(const std::string& run_id, const std::string& level,
                                const std::string& message) {
  std::lock_guard lock(impl_->mutex);
  SqliteTransaction tx(impl_->db);
  impl_->require_run(run_id);
  SqliteStmt s(impl_->db, "INSERT INTO events(run_id, time, level, message) VALUES (?,?,?,?)");
  s.bind(1, run_id).bind(2, now_iso()).bind(3, level).bind(4, message).run();
  tx.commit();
}

std::vector<EventRecord> ExperimentStore::events(const std::string& run_id) {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(impl_->db, "SELECT run_id, level, message, time FROM events WHERE run_id = ? ORDER BY id");
  s.bind(1, run_id);
  std::vector<EventRecord> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3)});
  return out;
}

std::string ExperimentStore::integrity_check() {
  std::lock_guard lock(impl_->mutex);
  SqliteStmt s(impl_->db, "PRAGMA integrity_check");
  std::string out;
  while (s.step()) {
    if (!out.empty()) out += '\n';
    out += s.text(0);
  }
  return out;
}

}  // namespace deltatune
