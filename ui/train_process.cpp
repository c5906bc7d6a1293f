#include "train_process.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>
#include <csignal>
#include <exception>

#include "deltatune/experiment_store.h"

namespace studio {

namespace {
constexpr int kPollMs = 700;
}

TrainProcess::TrainProcess(QObject* parent) : QObject(parent), cli_(findCli()) {
  poll_.setInterval(kPollMs);
  connect(&poll_, &QTimer::timeout, this, &TrainProcess::pollMetrics);
}

TrainProcess::~TrainProcess() {
  if (process_ && process_->state() != QProcess::NotRunning) {
    process_->disconnect(this);
    process_->kill();
    process_->waitForFinished(5000);
  }
}

QString TrainProcess::findCli() {
  const QString local = QCoreApplication::applicationDirPath() + QStringLiteral("/deltatune");
  if (QFileInfo(local).isExecutable()) return local;
  const QString onPath = QStandardPaths::findExecutable(QStringLiteral("deltatune"));
  if (!onPath.isEmpty()) return onPath;
  const QString buildTree = QStringLiteral(DT_CLI_BUILD_PATH);
  return QFileInfo(buildTree).isExecutable() ? buildTree : QString();
}

QString TrainProcess::runIdFromLine(const QString& line, qint64* totalSteps) {
  static const QRegularExpression re(QStringLiteral("^\\[info\\] run (\\S+): (\\d+) optimizer steps"));
  const auto m = re.match(line);
  if (!m.hasMatch()) return {};
  if (totalSteps) *totalSteps = m.captured(2).toLongLong();
  return m.captured(1);
}

bool TrainProcess::start(const QString& configYaml, const QString& configFile, const QString& dbPath,
                         const QString& resumeRun) {
  if (isRunning()) {
    lastError_ = tr("a run is already in progress");
    return false;
  }
  if (cli_.isEmpty() || !QFileInfo(cli_).isExecutable()) {
    lastError_ = tr("the 'deltatune' program was not found next to the studio or on PATH");
    return false;
  }
  QStringList args{QStringLiteral("train")};
  if (resumeRun.isEmpty()) {
    QDir().mkpath(QFileInfo(configFile).absolutePath());
    QSaveFile f(configFile);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text) || f.write(configYaml.toUtf8()) < 0 || !f.commit()) {
      lastError_ = tr("cannot write %1: %2").arg(configFile, f.errorString());
      return false;
    }
    args << configFile;
  } else {
    args << QStringLiteral("--resume") << resumeRun;
  }
  args << QStringLiteral("--db") << dbPath;
  dbPath_ = dbPath;
  runId_.clear();  // known from the child's first line (a resume prints it too)
  resuming_ = !resumeRun.isEmpty();
  totalSteps_ = 0;
  lastStep_ = 0;
  lastError_.clear();
  lastErrorLine_.clear();
  partial_[0].clear();
  partial_[1].clear();
  stopRequested_ = false;
  store_.reset();

  if (process_) process_->deleteLater();  // start() may run inside the last child's finished signal
  process_ = new QProcess(this);
  process_->setProcessChannelMode(QProcess::SeparateChannels);
  connect(process_, &QProcess::readyReadStandardOutput, this, [this] { readLines(false); });
  connect(process_, &QProcess::readyReadStandardError, this, [this] { readLines(true); });
  connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    onExit(code, status == QProcess::CrashExit);
  });
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) onExit(-1, true);
  });
  active_ = true;
  process_->start(cli_, args);
  poll_.start();
  return true;
}

bool TrainProcess::isRunning() const {
  return process_ && process_->state() != QProcess::NotRunning;
}

qint64 TrainProcess::pid() const {
  return process_ ? process_->processId() : 0;
}

bool TrainProcess::waitForFinished(int ms) {
  return !process_ || process_->waitForFinished(ms);
}

void TrainProcess::requestStop() {
  if (!isRunning()) return;
  stopRequested_ = true;
  // SIGINT, not QProcess::terminate's SIGTERM: both stop cooperatively, but SIGINT is what a user's
  // Ctrl-C sends and what the launcher forwards to every worker.
  ::kill(static_cast<pid_t>(process_->processId()), SIGINT);
}

void TrainProcess::readLines(bool fromStderr) {
  QByteArray& buf = partial_[fromStderr ? 1 : 0];
  buf += fromStderr ? process_->readAllStandardError() : process_->readAllStandardOutput();
  int nl;
  while ((nl = buf.indexOf('\n')) >= 0) {
    const QString line = QString::fromUtf8(buf.left(nl)).trimmed();
    buf.remove(0, nl + 1);
    if (!line.isEmpty()) handleLine(line);
  }
}

void TrainProcess::handleLine(const QString& line) {
  qint64 total = 0;
  const QString id = runIdFromLine(line, &total);
  if (!id.isEmpty()) {
    runId_ = id;
    totalSteps_ = total;
    if (resuming_) {
      // The steps up to the checkpoint it resumes from are known (the engine has dropped later ones by now).
      try {
        if (!store_) store_ = std::make_unique<deltatune::ExperimentStore>(dbPath_.toStdString());
        for (const deltatune::StepMetrics& m : store_->metrics(id.toStdString())) lastStep_ = std::max(lastStep_, m.step);
      } catch (const std::exception&) {
      }
    }
    emit runStarted(id, total);
    pollMetrics();
    return;
  }
  // Step lines on stdout repeat what the database holds (read by pollMetrics); the log keeps the rest.
  if (line.startsWith(QLatin1String("step "))) return;
  static const QRegularExpression ckpt(QStringLiteral("^\\[info\\] checkpoint at step (\\d+): (.*)$"));
  const auto m = ckpt.match(line);
  if (m.hasMatch()) {
    pollMetrics();
    emit checkpointWritten(m.captured(1).toLongLong(), m.captured(2));
    return;
  }
  deltatune::LogLevel level = deltatune::LogLevel::Info;
  QString text = line;
  static const QRegularExpression tag(QStringLiteral("^\\[(info|warning|error|failed|launcher|rank [^\\]]*)\\] ?"));
  const auto t = tag.match(line);
  if (t.hasMatch()) {
    const QString k = t.captured(1);
    if (k == QLatin1String("warning") || k.contains(QLatin1String("warning"))) level = deltatune::LogLevel::Warning;
    if (k == QLatin1String("error") || k == QLatin1String("failed") || k.contains(QLatin1String("error")))
      level = deltatune::LogLevel::Error;
    if (k == QLatin1String("info")) text = line.mid(t.capturedLength());
  } else if (line.startsWith(QLatin1String("error:"))) {
    level = deltatune::LogLevel::Error;
  }
  if (level == deltatune::LogLevel::Error) lastErrorLine_ = text;
  emit logged(level, text);
}

void TrainProcess::pollMetrics() {
  if (runId_.isEmpty()) return;
  try {
    if (!store_) store_ = std::make_unique<deltatune::ExperimentStore>(dbPath_.toStdString());
    for (const deltatune::StepMetrics& m : store_->metrics(runId_.toStdString())) {
      if (m.step <= lastStep_) continue;
      lastStep_ = m.step;
      emit stepReported(m);
    }
  } catch (const std::exception&) {
    // The database is busy or not yet created: the next poll reads it.
  }
}

void TrainProcess::onExit(int code, bool crashed) {
  if (!active_) return;  // one report per run (an error and the exit may both arrive)
  active_ = false;
  poll_.stop();
  if (process_) {
    readLines(false);
    readLines(true);
  }
  pollMetrics();
  QString status = code == 0 && !crashed ? QStringLiteral("finished") : QStringLiteral("failed");
  QString message;
  if (!runId_.isEmpty()) {
    try {
      if (!store_) store_ = std::make_unique<deltatune::ExperimentStore>(dbPath_.toStdString());
      store_->mark_crashed_runs();
      const auto r = store_->find_run(runId_.toStdString());
      if (r && r->status != "running") status = QString::fromStdString(r->status);
    } catch (const std::exception& e) {
      message = QString::fromUtf8(e.what());
    }
  }
  if (status == QLatin1String("finished") && stopRequested_ && lastStep_ < totalSteps_)
    status = QStringLiteral("cancelled");
  if (status != QLatin1String("finished") && status != QLatin1String("cancelled") && message.isEmpty()) {
    message = !lastErrorLine_.isEmpty() ? lastErrorLine_
              : code < 0               ? tr("'%1' could not be started").arg(cli_)
                                       : tr("'deltatune train' ended with exit code %1").arg(code);
  }
  store_.reset();
  emit runFinished(status, message);
}

}  // namespace studio
