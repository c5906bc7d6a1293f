#include "gpu_usage.h"

#include <QProcess>
#include <QStandardPaths>

namespace studio {

QList<GpuUsage> parseGpuUsage(const QString& csv) {
  QList<GpuUsage> out;
  constexpr int64_t kMiB = 1024 * 1024;
  for (const QString& line : csv.split('\n', Qt::SkipEmptyParts)) {
    const QStringList f = line.split(',');
    if (f.size() < 5) continue;
    bool ok[4] = {};
    GpuUsage u;
    u.index = f[0].trimmed().toInt(&ok[0]);
    u.name = f[1].trimmed();
    u.utilization = f[2].trimmed().toInt(&ok[1]);
    u.usedBytes = f[3].trimmed().toLongLong(&ok[2]) * kMiB;
    u.totalBytes = f[4].trimmed().toLongLong(&ok[3]) * kMiB;
    if (ok[0] && ok[1] && ok[2] && ok[3]) out.append(u);
  }
  return out;
}

GpuUsagePoller::GpuUsagePoller(QObject* parent)
    : QObject(parent), exe_(QStandardPaths::findExecutable(QStringLiteral("nvidia-smi"))) {
  timer_.setInterval(kIntervalMs);
  connect(&timer_, &QTimer::timeout, this, &GpuUsagePoller::poll);
}

GpuUsagePoller::~GpuUsagePoller() {
  if (process_) {
    process_->disconnect(this);
    process_->kill();
    process_->waitForFinished(1000);
  }
}

void GpuUsagePoller::setActive(bool active) {
  if (active == timer_.isActive()) return;
  if (active) {
    timer_.start();
  } else {
    timer_.stop();
  }
  poll();  // the first sample at once; after a run, the memory it gave back
}

void GpuUsagePoller::poll() {
  if (exe_.isEmpty() || process_) return;
  process_ = new QProcess(this);
  connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    if (status == QProcess::NormalExit && code == 0)
      usage_ = parseGpuUsage(QString::fromUtf8(process_->readAllStandardOutput()));
    process_->deleteLater();
    process_ = nullptr;
    emit updated(usage_);
  });
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    process_->deleteLater();
    process_ = nullptr;
    exe_.clear();
  });
  process_->start(exe_, {QStringLiteral("--query-gpu=index,name,utilization.gpu,memory.used,memory.total"),
                         QStringLiteral("--format=csv,noheader,nounits")});
}

}  // namespace studio
