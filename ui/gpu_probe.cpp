#include "gpu_probe.h"

#include <QProcess>
#include <QStandardPaths>

namespace studio {

QList<GpuInfo> parseNvidiaSmi(const QString& csv) {
  QList<GpuInfo> out;
  constexpr int64_t kMiB = 1024 * 1024;
  for (const QString& line : csv.split('\n', Qt::SkipEmptyParts)) {
    const QStringList f = line.split(',');
    if (f.size() < 4) continue;
    bool ok1 = false, ok2 = false, ok3 = false;
    GpuInfo g;
    g.index = f[0].trimmed().toInt(&ok1);
    g.name = f[1].trimmed();
    g.totalBytes = f[2].trimmed().toLongLong(&ok2) * kMiB;
    g.freeBytes = f[3].trimmed().toLongLong(&ok3) * kMiB;
    if (ok1 && ok2 && ok3) out.append(g);
  }
  return out;
}

GpuProbe::GpuProbe(QObject* parent) : QObject(parent) {}

void GpuProbe::refresh() {
  if (process_) return;
  const QString exe = QStandardPaths::findExecutable(QStringLiteral("nvidia-smi"));
  if (exe.isEmpty()) {
    gpus_.clear();
    emit gpusChanged();
    return;
  }
  process_ = new QProcess(this);
  connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    gpus_ = (status == QProcess::NormalExit && code == 0)
                ? parseNvidiaSmi(QString::fromUtf8(process_->readAllStandardOutput()))
                : QList<GpuInfo>{};
    process_->deleteLater();
    process_ = nullptr;
    emit gpusChanged();
  });
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    process_->deleteLater();
    process_ = nullptr;
    gpus_.clear();
    emit gpusChanged();
  });
  process_->start(exe, {QStringLiteral("--query-gpu=index,name,memory.total,memory.free"),
                        QStringLiteral("--format=csv,noheader,nounits")});
}

}  // namespace studio
