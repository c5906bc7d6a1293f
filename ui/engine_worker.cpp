#include "engine_worker.h"

#include <QMetaObject>
#include <QString>
#include <exception>

#include "run_controller.h"

namespace studio {

namespace {

class PostingObserver final : public deltatune::RunObserver {
 public:
  explicit PostingObserver(RunController* sink) : sink_(sink) {}

  void on_log(deltatune::LogLevel level, const std::string& message) override {
    QString msg = QString::fromStdString(message);
    post([level, msg](RunController* c) { c->handleLog(level, msg); });
  }
  void on_started(const std::string& run_id, int64_t total_steps) override {
    QString id = QString::fromStdString(run_id);
    post([id, total_steps](RunController* c) { c->handleStarted(id, total_steps); });
  }
  void on_step(const deltatune::StepMetrics& m) override {
    post([m](RunController* c) { c->handleStep(m); });
  }
  void on_checkpoint(int64_t step, const std::string& path) override {
    QString p = QString::fromStdString(path);
    post([step, p](RunController* c) { c->handleCheckpoint(step, p); });
  }
  void on_finished(const std::string& status, const std::string& message) override {
    finished_ = true;
    QString s = QString::fromStdString(status), msg = QString::fromStdString(message);
    post([s, msg](RunController* c) { c->handleFinished(s, msg); });
  }

  bool finished() const { return finished_; }

  template <typename F>
  void post(F f) {
    RunController* sink = sink_;
    QMetaObject::invokeMethod(
        sink, [sink, f]() { f(sink); }, Qt::QueuedConnection);
  }

 private:
  RunController* sink_;
  bool finished_ = false;
};

}  // namespace

EngineWorker::EngineWorker(RunController* sink, std::shared_ptr<deltatune::RunControl> control)
    : sink_(sink), control_(std::move(control)) {}

void EngineWorker::run(const deltatune::RunConfig& cfg, const deltatune::TrainOptions& opts) {
  PostingObserver observer(sink_);
  try {
    deltatune::train_run(cfg, observer, *control_, opts);
    if (!observer.finished()) observer.on_finished("finished", "");
  } catch (const std::exception& e) {
    // Config/data errors throw before training starts without an on_finished; errors during training
    // were already reported (and are rethrown), so only the first kind is reported here.
    if (!observer.finished()) observer.on_finished("failed", e.what());
  } catch (...) {
    if (!observer.finished()) observer.on_finished("failed", "unknown error in the engine");
  }
}

}  // namespace studio
