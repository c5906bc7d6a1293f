// The experiment database (SQLite, WAL). The engine writes; the studio and CLI read.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deltatune/trainer.h"

namespace deltatune {

struct RunRecord {
  std::string id;          // short unique id
  std::string name;
  std::string status;      // running | finished | failed | cancelled | crashed
  std::string created_at, finished_at;  // ISO-8601 UTC
  std::string model;
  std::string datasets;    // comma-separated paths
  std::string config_yaml;
  std::string output_dir;
  std::string engine_version, device;
  double final_loss = -1, best_eval_loss = -1;
  int64_t steps = 0, total_steps = 0;
  int64_t pid = 0;
  std::vector<std::string> tags;
  std::string notes;
};

struct ArtifactRecord {
  std::string run_id, kind, path;  // kind: checkpoint | adapter | merged
  int64_t step = 0;
  std::string created_at;
};

// One generation of a run's sample_prompts at one step.
struct SampleRecord {
  std::string run_id;
  int64_t step = 0;
  int64_t prompt_index = 0;   // position in the run's sample_prompts
  std::string prompt;         // the chat, a JSON array of {role, content}
  std::string text;           // the answer
  int64_t tokens = 0;         // generated tokens
  std::string finish_reason;  // stop | length
  std::string created_at;
};

struct EventRecord {
  std::string run_id, level, message, time;
};

class ExperimentStore {
 public:
  // Opens (creating and migrating) the database. Throws deltatune::Error naming the path.
  explicit ExperimentStore(const std::string& path);
  ~ExperimentStore();
  ExperimentStore(const ExperimentStore&) = delete;
  ExperimentStore& operator=(const ExperimentStore&) = delete;

  // $DELTATUNE_DB, else $XDG_DATA_HOME/deltatune/experiments.db, else ~/.local/share/deltatune/experiments.db;
  // creates the folder.
  static std::string default_path();
  const std::string& path() const;

  // Returns the new id (r.id when set and unused, else 8 random hex digits). Empty status = running,
  // empty created_at = now, pid 0 = this process. The owner's machine, boot and process start time are
  // recorded with the pid so mark_crashed_runs is not fooled by a pid reused after a reboot.
  std::string create_run(const RunRecord& r);
  // Writes every field of r (by r.id). Tags are only added, never removed (another process may have
  // tagged the run meanwhile). A new pid (resume) re-records the owner.
  void update_run(const RunRecord& r);
  // Terminal statuses set finished_at to now; running clears it.
  void set_status(const std::string& run_id, const std::string& status);
  // Exact id, then exact name, then unique id prefix; nullopt when nothing matches; throws Error when a
  // name or prefix matches several runs.
  std::optional<RunRecord> find_run(const std::string& id_or_name);
  // Newest first.
  std::vector<RunRecord> list_runs();
  void delete_run(const std::string& run_id);  // with its metrics, artifacts, events and tags
  void add_tag(const std::string& run_id, const std::string& tag);
  // Marks runs left `running` by a dead process as `crashed`; returns how many.
  int mark_crashed_runs();
  // Takes run `run_id` over for process `pid` (a resume): status running, finished_at cleared, the owner
  // re-recorded. One transaction, so of two processes resuming the same run at once exactly one gets it;
  // the other throws naming the owner. Throws when the run is finished, or running in a live process.
  // Returns the record as it was before (its status is what release_run puts back).
  RunRecord claim_run(const std::string& run_id, int64_t pid);
  // Undoes claim_run when the resume could not start: status and finished_at as in `before`, but only
  // while `pid` still owns the run. Returns whether it did.
  bool release_run(const RunRecord& before, int64_t pid);

  // Also keeps the run's steps / final_loss / best_eval_loss / total_steps current.
  void add_metrics(const std::string& run_id, const StepMetrics& m);
  std::vector<StepMetrics> metrics(const std::string& run_id);
  // Drops metrics and samples after `step` (used on resume so nothing is duplicated).
  void truncate_metrics(const std::string& run_id, int64_t step);

  // The step's generations of the run's sample_prompts (replacing any of the same step and prompt).
  void add_samples(const std::string& run_id, const std::vector<SampleRecord>& samples);
  // Ordered by step, then prompt_index.
  std::vector<SampleRecord> samples(const std::string& run_id);

  void add_artifact(const ArtifactRecord& a);
  std::vector<ArtifactRecord> artifacts(const std::string& run_id);
  void add_event(const std::string& run_id, const std::string& level, const std::string& message);
  std::vector<EventRecord> events(const std::string& run_id);

  std::string integrity_check();  // "ok" when healthy

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltatune
