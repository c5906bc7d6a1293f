// Memory and utilization of every NVIDIA GPU, polled from nvidia-smi (asynchronously) while a run is active,
// for the Monitor page's per-GPU table.
#pragma once
#include <QList>
#include <QObject>
#include <QString>
#include <QTimer>
#include <cstdint>

class QProcess;

namespace studio {

struct GpuUsage {
  int index = 0;
  QString name;
  int utilization = 0;  // percent
  int64_t usedBytes = 0, totalBytes = 0;
};

// Parses `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
// --format=csv,noheader,nounits`; lines that do not parse (e.g. "[N/A]") are skipped.
QList<GpuUsage> parseGpuUsage(const QString& csv);

class GpuUsagePoller : public QObject {
  Q_OBJECT
 public:
  explicit GpuUsagePoller(QObject* parent = nullptr);
  ~GpuUsagePoller() override;  // ends a query still running
  static constexpr int kIntervalMs = 2000;

  void setActive(bool active);  // polls every kIntervalMs while active, once more when turned off
  bool isActive() const { return timer_.isActive(); }
  const QList<GpuUsage>& usage() const { return usage_; }
  bool available() const { return !exe_.isEmpty(); }
  void poll();

 signals:
  void updated(const QList<studio::GpuUsage>& usage);

 private:
  QString exe_;
  QTimer timer_;
  QProcess* process_ = nullptr;
  QList<GpuUsage> usage_;
};

}  // namespace studio
