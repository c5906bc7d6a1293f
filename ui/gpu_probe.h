// Lists NVIDIA GPUs and their memory for the GPU choice and the VRAM check, by asking nvidia-smi
// asynchronously (the public engine API has no device query; nvidia-smi ships with every driver).
#pragma once
#include <QList>
#include <QObject>
#include <QString>
#include <cstdint>

class QProcess;

namespace studio {

struct GpuInfo {
  int index = 0;
  QString name;
  int64_t totalBytes = 0;
  int64_t freeBytes = 0;
};

// Parses `nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits`.
QList<GpuInfo> parseNvidiaSmi(const QString& csv);

class GpuProbe : public QObject {
  Q_OBJECT
 public:
  explicit GpuProbe(QObject* parent = nullptr);
  void refresh();  // emits gpusChanged when done (an empty list when there is no driver)
  const QList<GpuInfo>& gpus() const { return gpus_; }

 signals:
  void gpusChanged();

 private:
  QList<GpuInfo> gpus_;
  QProcess* process_ = nullptr;
};

}  // namespace studio
