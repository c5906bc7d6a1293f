#include "gpu_probe.h"

#include <QThread>
#include <memory>

namespace studio {

namespace {
QString cudaVersion(int v) { return QStringLiteral("%1.%2").arg(v / 1000).arg(v % 1000 / 10); }
}  // namespace

QList<GpuInfo> gpuList(const deltatune::GpuEnvironment& env) {
  QList<GpuInfo> out;
  for (const deltatune::GpuDevice& d : env.devices) {
    GpuInfo g;
    g.index = d.index;
    g.name = QString::fromStdString(d.name);
    g.totalBytes = d.total_bytes;
    g.freeBytes = d.free_bytes;
    g.arch = QString::fromStdString(d.arch);
    g.kernelPath = QString::fromStdString(d.kernel_path);
    g.problem = QString::fromStdString(d.problem);
    out.append(g);
  }
  return out;
}

QString describeGpuRuntime(const deltatune::GpuEnvironment& env) {
  QString driver = QObject::tr("no NVIDIA driver");
  if (env.driver_version)
    driver = QObject::tr("NVIDIA driver %1(CUDA %2)")
                 .arg(env.driver_release.empty() ? QString() : QString::fromStdString(env.driver_release) + ' ',
                      cudaVersion(env.driver_version));
  QString text = driver;
  if (env.runtime_version) text += QObject::tr(", CUDA runtime %1").arg(cudaVersion(env.runtime_version));
  if (!env.problem.empty()) text += QObject::tr(". The GPU backend cannot run: %1").arg(QString::fromStdString(env.problem));
  return text;
}

RuntimeLine describeRuntimeForBackend(const deltatune::GpuEnvironment* env, const QString& backend, int cpuThreads) {
  if (backend == QLatin1String("cpu"))
    return {QObject::tr("CPU backend: the run uses %1 CPU threads of this machine; no GPU or NVIDIA driver is "
                        "needed.")
                .arg(cpuThreads)};
  if (!env) return {QObject::tr("looking for the NVIDIA driver…")};
  const bool gpuRuns = env->runtime_loaded && env->problem.empty();
  if (backend == QLatin1String("cuda")) return {describeGpuRuntime(*env), !gpuRuns};
  if (gpuRuns) return {describeGpuRuntime(*env)};
  return {QObject::tr("Backend auto: no usable GPU here, so the run trains on the CPU (%1 threads). %2")
              .arg(cpuThreads)
              .arg(describeGpuRuntime(*env))};
}

GpuProbe::GpuProbe(QObject* parent) : QObject(parent) {}

GpuProbe::~GpuProbe() {
  if (thread_) thread_->wait();
}

void GpuProbe::refresh() {
  if (thread_) return;
  auto env = std::make_shared<deltatune::GpuEnvironment>();
  QThread* t = QThread::create([env] { *env = deltatune::gpu_environment(); });
  thread_ = t;
  connect(t, &QThread::finished, this, [this, t, env] {
    gpus_ = gpuList(*env);
    runtimeText_ = describeGpuRuntime(*env);
    env_ = *env;
    probed_ = true;
    t->deleteLater();
    emit gpusChanged();
  });
  t->start();
}

}  // namespace studio
