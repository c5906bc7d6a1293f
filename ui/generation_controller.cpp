#include "generation_controller.h"

#include <QMetaObject>

#include "generation_worker.h"

namespace studio {

GenerationController::GenerationController(QObject* parent)
    : QObject(parent), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  qRegisterMetaType<GeneratorInfo>();
  thread_.setObjectName(QStringLiteral("generation"));
  worker_ = new GenerationWorker(this, cancel_);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.start();
}

GenerationController::~GenerationController() {
  cancel_->store(true);
  thread_.quit();
  thread_.wait();
}

void GenerationController::load(const deltatune::GeneratorOptions& opts) {
  setBusy(true);
  GenerationWorker* w = worker_;
  QMetaObject::invokeMethod(
      w, [w, opts]() { w->load(opts); }, Qt::QueuedConnection);
}

bool GenerationController::generate(const std::vector<deltatune::GenerateRequest>& requests) {
  if (busy_ || !loaded_) return false;
  setBusy(true);
  cancel_->store(false);
  GenerationWorker* w = worker_;
  QMetaObject::invokeMethod(
      w, [w, requests]() { w->generate(requests); }, Qt::QueuedConnection);
  return true;
}

void GenerationController::cancel() {
  cancel_->store(true);
}

void GenerationController::handleLoaded(const GeneratorInfo& info) {
  info_ = info;
  loaded_ = true;
  setBusy(false);
  emit loaded(info);
}

void GenerationController::handleFailed(const QString& message) {
  setBusy(false);
  emit failed(message);
}

void GenerationController::handleLoadFailed(const QString& message, bool stillLoaded, const GeneratorInfo& info) {
  loaded_ = stillLoaded;
  info_ = stillLoaded ? info : GeneratorInfo{};
  setBusy(false);
  emit failed(message);
}

void GenerationController::handleFinished() {
  setBusy(false);
  emit finished();
}

void GenerationController::setBusy(bool b) {
  if (b == busy_) return;
  busy_ = b;
  emit busyChanged(b);
}

}  // namespace studio
