// Starts and steers a training run from the UI thread. The engine's synchronous train_run() runs in an
// EngineWorker on a private QThread; everything it reports comes back here as queued calls and leaves
// as signals on the UI thread. Stop and pause are atomics in a RunControl shared with the engine.
// A data-parallel run (several GPUs) and, with setProcessMode(true), every run go to a child
// `deltatune train` process instead (TrainProcess): same signals, no pause.
#pragma once
#include <QObject>
#include <QString>
#include <QThread>
#include <memory>

#include "deltatune/trainer.h"

namespace studio {

class EngineWorker;
class TrainProcess;

class RunController : public QObject {
  Q_OBJECT
 public:
  enum class State { Idle, Running, Paused, Stopping };
  Q_ENUM(State)

  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;  // stops a live run at its next step boundary and joins the thread

  // False (and nothing happens) while a run is active, or when a child process cannot be started
  // (lastError() says why).
  bool start(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts = {});
  // True: every run in a child process (the queue's runs); false: only data-parallel runs.
  void setProcessMode(bool on) { processMode_ = on; }
  // Whether `cfg` trains on several GPUs (a list of more than one, or `all`): such a run needs one worker
  // process per GPU, so it always runs as a child `deltatune train`.
  static bool isDataParallel(const deltatune::RunConfig& cfg);
  // The `deltatune` program child processes run (default: TrainProcess::findCli()).
  void setCliPath(const QString& path);
  bool inProcess() const { return process_ == nullptr || !processActive_; }
  bool canPause() const { return isActive() && !processActive_; }
  QString lastError() const { return lastError_; }
  void setPaused(bool paused);
  void requestStop();
  // requestStop(), then quit() and wait() for the worker thread. Blocks; for shutdown only.
  void shutdown();

  State state() const { return state_; }
  bool isActive() const { return state_ != State::Idle; }
  QString runId() const { return runId_; }

 signals:
  void stateChanged(studio::RunController::State state);
  void runStarted(const QString& runId, qint64 totalSteps);
  void stepReported(const deltatune::StepMetrics& metrics);
  void logged(deltatune::LogLevel level, const QString& message);
  void checkpointWritten(qint64 step, const QString& path);
  void runFinished(const QString& status, const QString& message);

 public:
  // Called (queued, on the UI thread) by the EngineWorker's observer only.
  void handleStarted(const QString& runId, qint64 totalSteps);
  void handleStep(const deltatune::StepMetrics& m);
  void handleLog(deltatune::LogLevel level, const QString& message);
  void handleCheckpoint(qint64 step, const QString& path);
  void handleFinished(const QString& status, const QString& message);

 private:
  void setState(State s);

  bool startProcess(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts);

  QThread thread_;
  EngineWorker* worker_ = nullptr;  // lives on thread_, deleted when it finishes
  TrainProcess* process_ = nullptr;
  bool processMode_ = false;
  bool processActive_ = false;
  QString cliPath_;
  QString lastError_;
  std::shared_ptr<deltatune::RunControl> control_;
  State state_ = State::Idle;
  QString runId_;
};

}  // namespace studio

Q_DECLARE_METATYPE(deltatune::StepMetrics)
Q_DECLARE_METATYPE(deltatune::LogLevel)
