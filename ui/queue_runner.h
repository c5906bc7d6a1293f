// Runs the entries of a RunQueue: one after another, or, when GPUs are picked for it, one per picked GPU
// side by side. Each run is a child `deltatune train` process (a RunController in process mode), so a
// failing run ends alone and the next one starts. A data-parallel entry (several GPUs of its own) runs
// alone. Nothing starts while `busy` (the Monitor's own run) says so.
#pragma once
#include <QList>
#include <QMap>
#include <QObject>
#include <functional>

#include "run_queue.h"

namespace studio {

class RunController;

class QueueRunner : public QObject {
  Q_OBJECT
 public:
  QueueRunner(RunQueue* queue, QObject* parent = nullptr);
  ~QueueRunner() override;

  // GPUs for side by side runs (each run's config gets its own); empty = one run at a time as configured.
  void setGpuPool(const QList<int>& gpus);
  QList<int> gpuPool() const { return pool_; }
  void setDatabasePath(const QString& path) { dbPath_ = path; }  // "" = the engine's default
  void setCliPath(const QString& path) { cliPath_ = path; }
  void setBusyCheck(std::function<bool()> busy) { busy_ = std::move(busy); }

  bool isActive() const { return active_; }
  int runningCount() const;
  // The controller running entry `id` (nullptr when it does not run).
  RunController* controllerOf(const QString& id) const;

 public slots:
  void setActive(bool active);  // start / pause taking new entries (running ones go on)
  void schedule();              // start what can start now
  void cancel(const QString& id);  // a queued entry: cancelled; a running one: stopped with a checkpoint
  // Stops every running entry (a checkpoint each) and marks it to resume next time; blocks until they ended.
  // For shutdown.
  void stopAllForShutdown();

 signals:
  void activeChanged(bool active);
  void runningChanged(int running);
  void message(const QString& text);

 private:
  struct Slot {
    RunController* controller = nullptr;
    int gpu = -1;  // -1 = as the entry's config says
    QString itemId;
    bool exclusive = false;  // runs a data-parallel entry: nothing else starts meanwhile
  };
  bool isDataParallelEntry(const QString& itemId) const;
  void startOn(Slot& slot, const QString& itemId);
  void finished(Slot& slot, const QString& status, const QString& message);
  void rebuildSlots();

  RunQueue* queue_;
  QList<Slot*> slots_;
  QList<int> pool_;
  QString dbPath_;
  QString cliPath_;
  std::function<bool()> busy_;
  bool active_ = false;
  bool shuttingDown_ = false;
};

}  // namespace studio
