#include "pages/monitor_page.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QStyle>
#include <QVBoxLayout>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "deltatune/trainer.h"
#include "format.h"
#include "gpu_usage.h"
#include "gpu_usage_view.h"
#include "live_plots.h"
#include "run_document.h"
#include "samples_view.h"

namespace studio {

MonitorPage::MonitorPage(RunDocument* doc, RunController* controller, AppSettings* settings, QWidget* parent)
    : QWidget(parent), doc_(doc), controller_(controller), settings_(settings) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  start_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaPlay), tr("Start"));
  pause_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaPause), tr("Pause"));
  pause_->setCheckable(true);
  stop_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaStop), tr("Stop"));
  stop_->setToolTip(tr("Stop at the next step boundary and write a checkpoint"));
  resume_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaSeekForward), tr("Resume"));
  resume_->setToolTip(tr("Continue the last stopped run from its checkpoint"));
  for (QPushButton* b : {start_, pause_, stop_, resume_}) bar->addWidget(b);
  runLabel_ = new QLabel(tr("No run yet."));
  bar->addSpacing(12);
  bar->addWidget(runLabel_, 1);
  outer->addLayout(bar);

  auto* progRow = new QHBoxLayout;
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat(tr("step %v / %m"));
  progRow->addWidget(progress_, 2);
  stats_ = new QLabel;
  stats_->setTextFormat(Qt::RichText);
  progRow->addWidget(stats_, 3);
  outer->addLayout(progRow);

  gpuView_ = new GpuUsageView;
  gpuPoller_ = new GpuUsagePoller(this);
  if (!gpuPoller_->available())
    gpuView_->setUnavailable(tr("No NVIDIA driver found (nvidia-smi): per-GPU memory and utilization are not shown."));
  connect(gpuPoller_, &GpuUsagePoller::updated, gpuView_, &GpuUsageView::setUsage);
  outer->addWidget(gpuView_);

  auto* split = new QSplitter(Qt::Vertical);
  plots_ = new LivePlots;
  split->addWidget(plots_);
  log_ = new QPlainTextEdit;
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  log_->setPlaceholderText(tr("Engine messages appear here."));
  split->addWidget(log_);
  samples_ = new SamplesView;
  samples_->setAllSteps(true);
  split->addWidget(samples_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setStretchFactor(2, 2);
  outer->addWidget(split, 1);

  connect(start_, &QPushButton::clicked, this, &MonitorPage::start);
  connect(resume_, &QPushButton::clicked, this, &MonitorPage::resume);
  connect(pause_, &QPushButton::clicked, this, &MonitorPage::togglePause);
  connect(stop_, &QPushButton::clicked, this, &MonitorPage::stop);
  connect(controller_, &RunController::stateChanged, this, &MonitorPage::onStateChanged);
  connect(controller_, &RunController::runStarted, this, &MonitorPage::onStarted);
  connect(controller_, &RunController::stepReported, this, &MonitorPage::onStep);
  connect(controller_, &RunController::logged, this, &MonitorPage::onLog);
  connect(controller_, &RunController::checkpointWritten, this, [this](qint64 step, const QString& path) {
    appendLog(QStringLiteral("#555555"), tr("checkpoint at step %1: %2").arg(step).arg(path));
  });
  connect(controller_, &RunController::runFinished, this, &MonitorPage::onFinished);
  onStateChanged(controller_->state());
}

QString MonitorPage::logText() const {
  return log_->toPlainText();
}

QString MonitorPage::runDevice(const QString& runId) const {
  try {
    const QString db = databasePath();
    deltatune::ExperimentStore store(db.isEmpty() ? deltatune::ExperimentStore::default_path() : db.toStdString());
    const auto run = store.find_run(runId.toStdString());
    return run ? QString::fromStdString(run->device) : QString();
  } catch (const std::exception&) {
    return {};  // only the memory plot's title depends on it
  }
}

QString MonitorPage::databasePath() const {
  return settings_->databasePath();
}

deltatune::TrainOptions MonitorPage::options(const QString& resumeRun) const {
  deltatune::TrainOptions o;
  o.db_path = databasePath().toStdString();
  o.resume_run = resumeRun.toStdString();
  return o;
}

bool MonitorPage::start() {
  plots_->clear();
  samples_->setRuns({});
  return startWith(options({}));
}

bool MonitorPage::resume() {
  if (lastRunId_.isEmpty()) return false;
  return startWith(options(lastRunId_));
}

bool MonitorPage::resumeRun(const QString& runId) {
  if (controller_->isActive()) return false;
  plots_->clear();
  try {
    const QString db = databasePath();
    deltatune::ExperimentStore store(db.isEmpty() ? deltatune::ExperimentStore::default_path()
                                                  : db.toStdString());
    plots_->setSteps(store.metrics(runId.toStdString()));
    samples_->setRuns({{runId, store.samples(runId.toStdString())}});
  } catch (const std::exception& e) {
    appendLog(QStringLiteral("#a05a00"),
              tr("Earlier metrics not shown: %1").arg(QString::fromUtf8(e.what())));
  }
  lastRunId_ = runId;
  return startWith(options(runId));
}

bool MonitorPage::startWith(const deltatune::TrainOptions& opts) {
  const deltatune::RunConfig& cfg = doc_->config();
  if (cfg.base_model.empty()) {
    appendLog(QStringLiteral("#b00020"), tr("Choose a model on the Model page first."));
    return false;
  }
  if (cfg.datasets.empty()) {
    appendLog(QStringLiteral("#b00020"), tr("Add a training file on the Data page first."));
    return false;
  }
  if (startGuard_) {
    const QString why = startGuard_();
    if (!why.isEmpty()) {
      appendLog(QStringLiteral("#b00020"), why);
      return false;
    }
  }
  if (opts.resume_run.empty()) takeFreeOutputDir();
  totalSteps_ = 0;
  last_ = {};
  appendLog(QStringLiteral("#1f77b4"),
            opts.resume_run.empty()
                ? tr("Starting a new run (%1 backend)…").arg(QString::fromStdString(cfg.backend))
                : tr("Resuming run %1…").arg(QString::fromStdString(opts.resume_run)));
  if (!controller_->start(cfg, opts)) {
    appendLog(QStringLiteral("#b00020"), tr("The run did not start: %1").arg(controller_->lastError()));
    return false;
  }
  return true;
}

// Start means a new run. The engine refuses an output_dir that holds an earlier run's adapter or checkpoints
// (it would replace them), so pressing Start again after a run keeps that run's files and writes next to them.
void MonitorPage::takeFreeOutputDir() {
  deltatune::RunConfig cfg = doc_->config();
  if (cfg.output_dir.empty()) return;
  const std::string free = deltatune::output_dir_unused(cfg.output_dir);
  if (free == cfg.output_dir) return;
  appendLog(QStringLiteral("#555555"),
            tr("%1 holds an earlier run's adapter or checkpoints (kept as they are); this run writes to %2. "
               "To continue that run instead, use Resume or the Experiments page.")
                .arg(QString::fromStdString(cfg.output_dir), QString::fromStdString(free)));
  cfg.output_dir = free;
  doc_->setConfig(cfg, this);
}

void MonitorPage::togglePause() {
  controller_->setPaused(controller_->state() != RunController::State::Paused);
}

void MonitorPage::stop() {
  appendLog(QStringLiteral("#555555"), tr("Stopping at the next step boundary…"));
  controller_->requestStop();
}

void MonitorPage::setQueueRunning(int running) {
  queueRunning_ = running;
  updateGpuPolling();
}

void MonitorPage::updateGpuPolling() {
  gpuPoller_->setActive(controller_->isActive() || queueRunning_ > 0);
}

void MonitorPage::onStateChanged(RunController::State s) {
  updateGpuPolling();
  const bool active = s != RunController::State::Idle;
  start_->setEnabled(!active);
  resume_->setEnabled(!active && !lastRunId_.isEmpty() && lastStatus_ != "finished");
  pause_->setEnabled(controller_->canPause() &&
                     (s == RunController::State::Running || s == RunController::State::Paused));
  pause_->setToolTip(active && !controller_->canPause()
                         ? tr("A run over several GPUs cannot pause (stop it; it resumes from its checkpoint)")
                         : QString());
  pause_->setChecked(s == RunController::State::Paused);
  pause_->setText(s == RunController::State::Paused ? tr("Continue") : tr("Pause"));
  stop_->setEnabled(s == RunController::State::Running || s == RunController::State::Paused);
  if (s == RunController::State::Paused) runLabel_->setText(tr("Run %1 — paused").arg(lastRunId_));
  if (s == RunController::State::Stopping) runLabel_->setText(tr("Run %1 — stopping…").arg(lastRunId_));
  if (s == RunController::State::Running && !lastRunId_.isEmpty() && controller_->runId() == lastRunId_)
    runLabel_->setText(tr("Run %1 — running").arg(lastRunId_));
}

void MonitorPage::onStarted(const QString& runId, qint64 total) {
  lastRunId_ = runId;
  lastStatus_ = QStringLiteral("running");
  totalSteps_ = total;
  progress_->setRange(0, static_cast<int>(std::max<qint64>(1, total)));
  runLabel_->setText(tr("Run <b>%1</b> — running").arg(runId));
  plots_->setMemoryOnHost(runDevice(runId) == QStringLiteral("cpu"));
  emit runListChanged();
}

void MonitorPage::onStep(const deltatune::StepMetrics& m) {
  last_ = m;
  plots_->addStep(m);
  const qint64 total = m.total_steps > 0 ? m.total_steps : totalSteps_;
  progress_->setRange(0, static_cast<int>(std::max<qint64>(1, total)));
  progress_->setValue(static_cast<int>(m.step));
  const double perStep = m.step > 0 ? m.wall_seconds / static_cast<double>(m.step) : 0;
  const double eta = total > m.step ? perStep * static_cast<double>(total - m.step) : 0;
  stats_->setText(tr("epoch <b>%1</b> · loss <b>%2</b> · <b>%3</b> tokens/s · ETA <b>%4</b> · %5 tokens seen")
                      .arg(m.epoch, 0, 'f', 2)
                      .arg(m.loss, 0, 'f', 4)
                      .arg(m.tokens_per_second, 0, 'f', 0)
                      .arg(formatDuration(eta))
                      .arg(formatCount(m.tokens_seen)));
  if (m.eval_loss >= 0)
    appendLog(QStringLiteral("#d62728"), tr("step %1: eval loss %2").arg(m.step).arg(m.eval_loss, 0, 'f', 4));
  // The engine stores the step's sample generations before reporting an eval step (and the last step).
  const deltatune::RunConfig& cfg = doc_->config();
  const bool samples = !cfg.sample_prompts.empty() || !cfg.sample_prompts_file.empty();
  if (samples && ((cfg.eval_steps > 0 && m.step % cfg.eval_steps == 0) || m.step == total)) refreshSamples();
}

void MonitorPage::refreshSamples() {
  if (lastRunId_.isEmpty()) return;
  try {
    const QString db = databasePath();
    deltatune::ExperimentStore store(db.isEmpty() ? deltatune::ExperimentStore::default_path() : db.toStdString());
    samples_->setRuns({{lastRunId_, store.samples(lastRunId_.toStdString())}});
  } catch (const std::exception& e) {
    appendLog(QStringLiteral("#a05a00"), tr("Sample generations not shown: %1").arg(QString::fromUtf8(e.what())));
  }
}

void MonitorPage::onLog(deltatune::LogLevel level, const QString& message) {
  const char* color = level == deltatune::LogLevel::Error     ? "#b00020"
                      : level == deltatune::LogLevel::Warning ? "#a05a00"
                                                              : "#222222";
  appendLog(QLatin1String(color), message);
}

void MonitorPage::onFinished(const QString& status, const QString& message) {
  plots_->flush();
  lastStatus_ = status;
  const QString color = status == "finished"    ? QStringLiteral("#2c7a2c")
                        : status == "cancelled" ? QStringLiteral("#a05a00")
                                                : QStringLiteral("#b00020");
  runLabel_->setText(tr("Run <b>%1</b> — <span style='color:%2'>%3</span>")
                         .arg(lastRunId_.isEmpty() ? tr("(not started)") : lastRunId_, color, status));
  appendLog(color, message.isEmpty() ? tr("Run %1.").arg(status) : tr("Run %1: %2").arg(status, message));
  onStateChanged(controller_->state());
  emit runListChanged();
}

void MonitorPage::appendLog(const QString& color, const QString& text) {
  const QString time = QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss"));
  log_->appendHtml(QStringLiteral("<span style='color:#888'>%1</span> <span style='color:%2'>%3</span>")
                       .arg(time, color, text.toHtmlEscaped()));
}

}  // namespace studio
