// One training run in a child `deltatune train` process: the way the studio runs a data-parallel run (the
// engine's launcher starts one worker process per GPU, which an in-process thread cannot do) and the runs of
// the queue (several side by side, each isolated in its own process). Progress comes from the child's log
// lines (run id, messages) and from the experiment database (every step's metrics, the final status).
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <memory>

#include "deltatune/trainer.h"

class QProcess;

namespace deltatune {
class ExperimentStore;
}

namespace studio {

class TrainProcess : public QObject {
  Q_OBJECT
 public:
  explicit TrainProcess(QObject* parent = nullptr);
  ~TrainProcess() override;  // kills a child still running (callers stop it first)

  // The `deltatune` command-line program: next to the studio's executable, else on PATH, else the one of the
  // build tree the studio was built in; "" when missing.
  static QString findCli();
  void setCliPath(const QString& path) { cli_ = path; }
  QString cliPath() const { return cli_; }

  // Writes `configYaml` to `configFile` (atomically) and starts `deltatune train configFile --db dbPath`, or
  // `deltatune train --resume resumeRun --db dbPath` when resumeRun is set. False (with lastError()) when the
  // program is missing or the file cannot be written.
  bool start(const QString& configYaml, const QString& configFile, const QString& dbPath,
             const QString& resumeRun = {});
  void requestStop();  // SIGINT: the run stops at its next step boundary with a checkpoint
  bool isRunning() const;
  // Blocks until the child ends (or `ms` pass); for shutdown.
  bool waitForFinished(int ms);
  QString runId() const { return runId_; }
  QString lastError() const { return lastError_; }
  qint64 pid() const;

  // The run id in a `deltatune train` line "[info] run <id>: <n> optimizer steps" ("" when not such a line).
  static QString runIdFromLine(const QString& line, qint64* totalSteps = nullptr);

 signals:
  void runStarted(const QString& runId, qint64 totalSteps);
  void stepReported(const deltatune::StepMetrics& metrics);
  void logged(deltatune::LogLevel level, const QString& message);
  void checkpointWritten(qint64 step, const QString& path);
  // status: finished | cancelled | failed | crashed
  void runFinished(const QString& status, const QString& message);

 private:
  void readLines(bool fromStderr);
  void handleLine(const QString& line);
  void pollMetrics();
  void onExit(int code, bool crashed);

  QString cli_;
  QString dbPath_;
  QProcess* process_ = nullptr;
  QTimer poll_;
  std::unique_ptr<deltatune::ExperimentStore> store_;
  QString runId_;
  qint64 totalSteps_ = 0;
  int64_t lastStep_ = 0;
  QString lastError_;
  QString lastErrorLine_;
  QByteArray partial_[2];
  bool stopRequested_ = false;
  bool resuming_ = false;
  bool active_ = false;  // started and its end not yet reported
};

}  // namespace studio
