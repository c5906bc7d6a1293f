#include "run_controller.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QMetaObject>
#include <QRandomGenerator>
#include <QRegularExpression>

#include "deltatune/experiment_store.h"
#include "engine_worker.h"
#include "train_process.h"

namespace studio {

RunController::RunController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<deltatune::StepMetrics>();
  qRegisterMetaType<deltatune::LogLevel>();
  thread_.setObjectName(QStringLiteral("engine"));
}

RunController::~RunController() {
  shutdown();
}

bool RunController::isDataParallel(const deltatune::RunConfig& cfg) {
  return cfg.gpus_all || cfg.gpus.size() > 1;
}

void RunController::setCliPath(const QString& path) {
  cliPath_ = path;
  if (process_) process_->setCliPath(path);
}

bool RunController::start(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts) {
  if (isActive()) return false;
  lastError_.clear();
  if (processMode_ || isDataParallel(cfg)) return startProcess(cfg, opts);
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

bool RunController::startProcess(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts) {
  if (!process_) {
    process_ = new TrainProcess(this);
    if (!cliPath_.isEmpty()) process_->setCliPath(cliPath_);
    connect(process_, &TrainProcess::runStarted, this, &RunController::handleStarted);
    connect(process_, &TrainProcess::stepReported, this, &RunController::handleStep);
    connect(process_, &TrainProcess::logged, this, &RunController::handleLog);
    connect(process_, &TrainProcess::checkpointWritten, this, &RunController::handleCheckpoint);
    connect(process_, &TrainProcess::runFinished, this, [this](const QString& status, const QString& message) {
      processActive_ = false;
      handleFinished(status, message);
    });
  }
  const QString db = QString::fromStdString(opts.db_path.empty() ? deltatune::ExperimentStore::default_path()
                                                                  : opts.db_path);
  // The child reads the run from a file of its own next to the database (kept: it documents the run).
  const QString name = QString::fromStdString(cfg.run_name.empty() ? "run" : cfg.run_name)
                           .replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.-]")), QStringLiteral("_"));
  const QString file = QFileInfo(db).absolutePath() + QStringLiteral("/run-files/%1-%2-%3.yaml")
                                                        .arg(name)
                                                        .arg(QDateTime::currentDateTimeUtc().toString("yyyyMMdd-HHmmss"))
                                                        .arg(QRandomGenerator::global()->generate() & 0xffff, 4, 16,
                                                             QChar('0'));
  runId_.clear();
  if (!process_->start(QString::fromStdString(deltatune::run_config_to_yaml(cfg)), file, db,
                       QString::fromStdString(opts.resume_run))) {
    lastError_ = process_->lastError();
    return false;
  }
  processActive_ = true;
  setState(State::Running);
  return true;
}

void RunController::setPaused(bool paused) {
  if (processActive_) return;  // a child process has no pause
  if (!control_ || (state_ != State::Running && state_ != State::Paused)) return;
  control_->pause.store(paused);
  setState(paused ? State::Paused : State::Running);
}

void RunController::requestStop() {
  if (processActive_) {
    process_->requestStop();
    setState(State::Stopping);
    return;
  }
  if (!control_ || !isActive()) return;
  control_->stop.store(true);
  control_->pause.store(false);  // a paused run must reach its step boundary to stop
  setState(State::Stopping);
}

void RunController::shutdown() {
  requestStop();
  if (process_ && processActive_) process_->waitForFinished(60000);
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
