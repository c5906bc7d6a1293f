// Lives on the RunController's thread and makes the blocking engine call there. Observer callbacks
// are copied into value types and re-posted to the controller with Qt::QueuedConnection; no engine
// object is ever touched from the UI thread.
#pragma once
#include <QObject>
#include <memory>

#include "deltatune/trainer.h"

namespace studio {

class RunController;

class EngineWorker : public QObject {
  Q_OBJECT
 public:
  EngineWorker(RunController* sink, std::shared_ptr<deltatune::RunControl> control);

  // Runs on the worker thread; returns when the run has finished, failed or was stopped.
  void run(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts);

 private:
  RunController* sink_;  // outlives the worker thread (its destructor joins it)
  std::shared_ptr<deltatune::RunControl> control_;
};

}  // namespace studio
