#include "train/train_run_session.h"

#include <unistd.h>

#include "train/train_run_util.h"

namespace deltatune {

ReleaseUnlessStarted::~ReleaseUnlessStarted() {
  if (started || !store || !before) return;
  try {
    store->release_run(*before, static_cast<int64_t>(::getpid()));
  } catch (const std::exception&) {
    // Left running by a process that ends: marked crashed (still resumable) by the next reader.
  }
}

TrainSession::TrainSession(const RunConfig& cfg_in, RunObserver& observer, RunControl& run_control,
                           const TrainOptions& options, DataParallel* data_parallel)
    : cfg(cfg_in),
      obs(observer),
      control(run_control),
      topts(options),
      dp(data_parallel),
      root(!data_parallel || data_parallel->root()),
      world(data_parallel ? data_parallel->world() : 1),
      resuming(!options.resume_run.empty()) {}

void TrainSession::log(LogLevel level, const std::string& message) { obs.on_log(level, message); }

void TrainSession::event(LogLevel level, const std::string& message) {
  log(level, message);
  if (store && !run_id.empty())
    store->add_event(run_id, level == LogLevel::Error     ? "error"
                             : level == LogLevel::Warning ? "warning"
                                                          : "info",
                     message);
}

void TrainSession::set_status(const std::string& status) {
  if (!store || run_id.empty()) return;
  auto r = store->find_run(run_id);
  if (!r) return;
  r->status = status;
  r->finished_at = now_iso();
  r->steps = step;
  if (last_loss >= 0) r->final_loss = last_loss;
  if (best_eval >= 0) r->best_eval_loss = best_eval;
  store->update_run(*r);
}

void TrainSession::note_resume_failure(const std::string& why) {
  if (!resumed) return;
  try {
    store->add_event(resumed->id, "error", "resume failed: " + why);
  } catch (const std::exception&) {
    // The database itself failing must not hide the reason the resume failed.
  }
}

}  // namespace deltatune
