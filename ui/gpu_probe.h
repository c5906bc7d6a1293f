// Lists NVIDIA GPUs and their memory for the GPU choice and the VRAM check, and says which driver, CUDA
// runtime and kernel path are in use or what to install: deltatune::gpu_environment(), asked on a worker
// thread (loading the driver and the GPU module takes a moment).
#pragma once
#include <QList>
#include <QObject>
#include <QPointer>
#include <QString>
#include <cstdint>

#include "deltatune/gpu_info.h"

class QThread;

namespace studio {

struct GpuInfo {
  int index = 0;
  QString name;
  int64_t totalBytes = 0;
  int64_t freeBytes = 0;
  QString arch;        // "sm_90"
  QString kernelPath;  // "hopper" | "portable" | "" (not decided / not supported)
  QString problem;     // why this GPU cannot train
};

QList<GpuInfo> gpuList(const deltatune::GpuEnvironment& env);
// One line for the Train page: "NVIDIA driver 580.95.05 (CUDA 13.0), CUDA runtime 13.0" or what to install.
QString describeGpuRuntime(const deltatune::GpuEnvironment& env);

// The Train page's runtime line for the chosen Backend (auto | cpu | cuda). `env` is null until the probe has
// answered. warning is true only when the cuda backend is chosen and cannot run here: with cpu the line says
// what the CPU run uses, with auto it says the run falls back to the CPU.
struct RuntimeLine {
  QString text;
  bool warning = false;
};
RuntimeLine describeRuntimeForBackend(const deltatune::GpuEnvironment* env, const QString& backend, int cpuThreads);

class GpuProbe : public QObject {
  Q_OBJECT
 public:
  explicit GpuProbe(QObject* parent = nullptr);
  ~GpuProbe() override;
  void refresh();  // emits gpusChanged when done (an empty list when there is no driver)
  const QList<GpuInfo>& gpus() const { return gpus_; }
  const QString& runtimeText() const { return runtimeText_; }
  const deltatune::GpuEnvironment* environment() const { return probed_ ? &env_ : nullptr; }
  bool probed() const { return probed_; }

 signals:
  void gpusChanged();

 private:
  QList<GpuInfo> gpus_;
  QString runtimeText_;
  deltatune::GpuEnvironment env_;
  bool probed_ = false;
  QPointer<QThread> thread_;
};

}  // namespace studio
