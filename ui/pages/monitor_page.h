// Monitor page: Start / Pause / Stop / Resume of the run being edited, progress with ETA and
// throughput, memory and utilization of every GPU while runs are active, live plots, the engine's log and the
// answers to the config's sample_prompts at each eval step.
#pragma once
#include <QWidget>
#include <functional>

#include "deltatune/trainer.h"
#include "run_controller.h"

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;

namespace studio {

class AppSettings;
class GpuUsagePoller;
class GpuUsageView;
class LivePlots;
class RunDocument;
class SamplesView;

class MonitorPage : public QWidget {
  Q_OBJECT
 public:
  MonitorPage(RunDocument* doc, RunController* controller, AppSettings* settings, QWidget* parent = nullptr);

  LivePlots* plots() const { return plots_; }
  SamplesView* samples() const { return samples_; }  // the run's sample_prompts answers per eval step
  GpuUsageView* gpuView() const { return gpuView_; }
  GpuUsagePoller* gpuPoller() const { return gpuPoller_; }
  QString lastRunId() const { return lastRunId_; }
  QString lastStatus() const { return lastStatus_; }
  QString logText() const;
  int lastStep() const { return static_cast<int>(last_.step); }
  QString databasePath() const;  // what TrainOptions.db_path gets ("" = engine default)
  QString runDevice(const QString& runId) const;  // the run record's device ("cpu", "cuda:0 ...") or ""
  // Asked before a start: a non-empty answer is why the run cannot start now (e.g. queued runs train).
  void setStartGuard(std::function<QString()> guard) { startGuard_ = std::move(guard); }

 public slots:
  bool start();
  bool resume();  // continues lastRunId() from its last checkpoint
  // Continues any run of the database (e.g. one stopped in an earlier session); its metrics so far
  // are drawn first.
  bool resumeRun(const QString& runId);
  void togglePause();
  void stop();
  // Runs of the queue that train meanwhile (the GPU table is polled while any run is active).
  void setQueueRunning(int running);

 signals:
  void runListChanged();  // a run started or ended: the experiments table is stale

 private:
  deltatune::TrainOptions options(const QString& resumeRun) const;
  bool startWith(const deltatune::TrainOptions& opts);
  void takeFreeOutputDir();
  void onStateChanged(RunController::State s);
  void onStarted(const QString& runId, qint64 total);
  void onStep(const deltatune::StepMetrics& m);
  void onLog(deltatune::LogLevel level, const QString& message);
  void onFinished(const QString& status, const QString& message);
  void appendLog(const QString& color, const QString& text);
  void updateGpuPolling();
  void refreshSamples();

  RunDocument* doc_;
  RunController* controller_;
  AppSettings* settings_;
  QPushButton* start_;
  QPushButton* pause_;
  QPushButton* stop_;
  QPushButton* resume_;
  QLabel* runLabel_;
  QProgressBar* progress_;
  QLabel* stats_;
  LivePlots* plots_;
  SamplesView* samples_;
  GpuUsageView* gpuView_;
  GpuUsagePoller* gpuPoller_;
  int queueRunning_ = 0;
  QPlainTextEdit* log_;
  QString lastRunId_;
  QString lastStatus_;
  deltatune::StepMetrics last_;
  qint64 totalSteps_ = 0;
  std::function<QString()> startGuard_;
};

}  // namespace studio
