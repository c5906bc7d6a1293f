// train_run: a training run from a run config to a PEFT adapter, synchronously on the caller's thread.
// The steps are in train_run_steps.h; what they share is the TrainSession (train_run_session.h).
#include "deltatune/trainer.h"
#include "train/checkpoint.h"
#include "train/train_run_steps.h"

namespace deltatune {
namespace {

std::string train_on_this_worker(const RunConfig& cfg, RunObserver& obs, RunControl& control,
                                 const TrainOptions& topts, DataParallel* dp) {
  TrainSession s(cfg, obs, control, topts, dp);
  open_experiment_store(s);
  claim_resumed_run(s);
  check_new_output_dir(s);
  load_inputs(s);
  start_backend(s);
  plan_steps(s);
  restore_or_create_run(s);
  return train_steps(s);
}

}  // namespace

std::string train_run(const RunConfig& cfg, RunObserver& obs, RunControl& control, const TrainOptions& topts) {
  if (!topts.dist.active()) return train_on_this_worker(cfg, obs, control, topts, nullptr);
  DataParallel dp(topts.dist);  // joins the other workers (or throws DistFault naming who is missing)
  try {
    return train_on_this_worker(cfg, obs, control, topts, &dp);
  } catch (const DistFault& e) {
    dp.fail(e.what());  // the fault came from elsewhere: passed on to any peer that has not heard yet
    throw;
  } catch (const std::exception& e) {
    dp.fail(dp.host().describe(dp.rank()) + ": " + e.what());
    throw;
  }
}

std::string output_dir_unused(const std::string& output_dir) {
  std::string dir = output_dir;
  for (int n = 2; !run_files_in(dir, true).empty(); ++n) dir = output_dir + "-" + std::to_string(n);
  return dir;
}

}  // namespace deltatune
