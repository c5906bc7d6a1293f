#include "run_controller.h"

#include <QMetaObject>

#include "engine_worker.h"

namespace studio {

RunController::RunController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<deltatune::StepMetrics>();
  qRegisterMetaType<deltatune::LogLevel>();
  thread_.setObjectName(QStringLiteral("engine"));
}

RunController::~RunController() {
  shutdown();
}

bool RunController::start(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts) {
  if (isActive()) return false;
  // A fresh control block per run: a stop flag left set by the last run must not stop this one.
  control_ = std::make_shared<deltatune::RunControl>();
  if (!thread_.isRunning()) thread_.start();
  auto* worker = new EngineWorker(this, control_);
  worker->moveToThread(&thread_);
  worker_ = worker;
  runId_.clear();
  setState(State::Running);
  QMetaObject::invokeMethod(
      worker,
      [worker, cfg, opts]() {
        worker->run(cfg, opts);
        worker->deleteLater();
      },
      Qt::QueuedConnection);
  return true;
}

void RunController::setPaused(bool paused) {
  if (!control_ || (state_ != State::Running && state_ != State::Paused)) return;
  control_->pause.store(paused);
  setState(paused ? State::Paused : State::Running);
}

void RunController::requestStop() {
  if (!control_ || !isActive()) return;
  control_->stop.store(true);
  control_->pause.store(false);  // a paused run must reach its step boundary to stop
  setState(State::Stopping);
}

void RunController::shutdown() {
  requestStop();
  thread_.quit();
  thread_.wait();
}

void RunController::handleStarted(const QString& runId, qint64 totalSteps) {
  runId_ = runId;
  emit runStarted(runId, totalSteps);
}

void RunController::handleStep(const deltatune::StepMetrics& m) {
  emit stepReported(m);
}

void RunController::handleLog(deltatune::LogLevel level, const QString& message) {
  emit logged(level, message);
}

void RunController::handleCheckpoint(qint64 step, const QString& path) {
  emit checkpointWritten(step, path);
}

void RunController::handleFinished(const QString& status, const QString& message) {
  worker_ = nullptr;
  setState(State::Idle);
  emit runFinished(status, message);
}

void RunController::setState(State s) {
  if (s == state_) return;
  state_ = s;
  emit stateChanged(s);
}

}  // namespace studio
