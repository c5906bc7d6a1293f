#include "queue_runner.h"

#include <QTimer>
#include <exception>

#include "deltatune/run_config.h"
#include "run_controller.h"

namespace studio {

QueueRunner::QueueRunner(RunQueue* queue, QObject* parent) : QObject(parent), queue_(queue) {}

QueueRunner::~QueueRunner() {
  qDeleteAll(slots_);
}

void QueueRunner::setGpuPool(const QList<int>& gpus) {
  pool_ = gpus;
  schedule();
}

int QueueRunner::runningCount() const {
  int n = 0;
  for (const Slot* s : slots_) n += s->itemId.isEmpty() ? 0 : 1;
  return n;
}

RunController* QueueRunner::controllerOf(const QString& id) const {
  for (const Slot* s : slots_)
    if (s->itemId == id) return s->controller;
  return nullptr;
}

void QueueRunner::setActive(bool active) {
  if (active == active_) return;
  active_ = active;
  emit activeChanged(active);
  schedule();
}

void QueueRunner::schedule() {
  if (!active_ || shuttingDown_) return;
  if (busy_ && busy_()) return;
  const QList<int> wanted = pool_.isEmpty() ? QList<int>{-1} : pool_;
  // Idle slots of GPUs no longer picked go; every picked GPU gets one.
  for (qsizetype i = slots_.size() - 1; i >= 0; --i) {
    if (slots_[i]->itemId.isEmpty() && !wanted.contains(slots_[i]->gpu)) {
      delete slots_[i]->controller;
      delete slots_[i];
      slots_.removeAt(i);
    }
  }
  for (int g : wanted) {
    bool has = false;
    for (const Slot* s : slots_) has = has || s->gpu == g;
    if (!has) {
      auto* s = new Slot;
      s->gpu = g;
      s->controller = new RunController(this);
      s->controller->setProcessMode(true);
      if (!cliPath_.isEmpty()) s->controller->setCliPath(cliPath_);
      slots_.append(s);
    }
  }
  int running = runningCount();
  const int capacity = static_cast<int>(wanted.size());
  for (const Slot* s : slots_)
    if (s->exclusive) running = capacity;  // a data-parallel run has the GPUs to itself
  for (Slot* s : slots_) {
    if (running >= capacity) break;
    if (!s->itemId.isEmpty() || !wanted.contains(s->gpu)) continue;
    const QString id = queue_->nextQueued();
    if (id.isEmpty()) break;
    if (isDataParallelEntry(id)) {
      if (running > 0) break;  // waits, in order, until the GPUs are free
      s->exclusive = true;
      startOn(*s, id);
      if (s->itemId.isEmpty()) {
        s->exclusive = false;
        continue;
      }
      break;
    }
    startOn(*s, id);
    if (!s->itemId.isEmpty()) ++running;
  }
  emit runningChanged(runningCount());
  // When every queued entry failed to start, nothing is running: the loop above ran through them all.
}

bool QueueRunner::isDataParallelEntry(const QString& itemId) const {
  const QueueItem* it = queue_->item(queue_->rowOfId(itemId));
  try {
    return it && RunController::isDataParallel(
                     deltatune::run_config_from_yaml_string(it->configYaml.toStdString(), "/"));
  } catch (const std::exception&) {
    return false;  // startOn reports the parse error
  }
}

void QueueRunner::startOn(Slot& slot, const QString& itemId) {
  const QueueItem* it = queue_->item(queue_->rowOfId(itemId));
  deltatune::RunConfig cfg;
  try {
    cfg = deltatune::run_config_from_yaml_string(it->configYaml.toStdString(), "/");
  } catch (const std::exception& e) {
    const QString why = tr("its config does not parse: %1").arg(QString::fromUtf8(e.what()));
    queue_->update(itemId, [&](QueueItem& q) {
      q.state = QueueItem::State::Failed;
      q.message = why;
    });
    return;
  }
  if (slot.gpu >= 0 && !RunController::isDataParallel(cfg)) {
    cfg.gpu = slot.gpu;  // side by side: this slot's GPU
    cfg.gpus.clear();
  }
  const QString resume = it->resumeRun;
  RunController* c = slot.controller;
  c->disconnect(this);
  Slot* sp = &slot;
  connect(c, &RunController::runStarted, this, [this, itemId](const QString& runId, qint64 total) {
    queue_->update(itemId, [&](QueueItem& q) {
      q.runId = runId;
      q.totalSteps = total;
    });
  });
  connect(c, &RunController::stepReported, this, [this, itemId](const deltatune::StepMetrics& m) {
    queue_->update(itemId, [&](QueueItem& q) {
      q.step = m.step;
      if (m.total_steps > 0) q.totalSteps = m.total_steps;
      q.loss = m.loss;
    });
  });
  connect(c, &RunController::runFinished, this,
          [this, sp](const QString& status, const QString& msg) { finished(*sp, status, msg); });
  deltatune::TrainOptions opts;
  opts.db_path = dbPath_.toStdString();
  opts.resume_run = resume.toStdString();
  slot.itemId = itemId;
  queue_->update(itemId, [&](QueueItem& q) {
    q.state = QueueItem::State::Running;
    q.gpu = slot.exclusive ? -1 : slot.gpu;
    q.message.clear();
  });
  if (!c->start(cfg, opts)) {
    slot.itemId.clear();
    const QString why = c->lastError();
    queue_->update(itemId, [&](QueueItem& q) {
      q.state = QueueItem::State::Failed;
      q.message = why;
    });
    emit message(tr("Queued run %1 did not start: %2").arg(it->name, why));
  }
}

void QueueRunner::finished(Slot& slot, const QString& status, const QString& msg) {
  const QString id = slot.itemId;
  slot.itemId.clear();
  slot.exclusive = false;
  queue_->update(id, [&](QueueItem& q) {
    if (shuttingDown_ && !q.runId.isEmpty() && status != QLatin1String("finished")) {
      // Stopped because the studio closes: continue from the checkpoint next time.
      q.state = QueueItem::State::Queued;
      q.resumeRun = q.runId;
      q.message = tr("stopped when the studio closed; will resume run %1").arg(q.runId);
      return;
    }
    q.state = status == QLatin1String("finished")    ? QueueItem::State::Done
              : status == QLatin1String("cancelled") ? QueueItem::State::Cancelled
                                                     : QueueItem::State::Failed;
    q.message = msg;
    if (q.state == QueueItem::State::Done) q.resumeRun.clear();
  });
  emit runningChanged(runningCount());
  // Start the next one from the event loop, not inside the finished process's signal.
  QTimer::singleShot(0, this, &QueueRunner::schedule);
}

void QueueRunner::cancel(const QString& id) {
  const QueueItem* it = queue_->item(queue_->rowOfId(id));
  if (!it) return;
  if (it->state == QueueItem::State::Queued) {
    queue_->update(id, [](QueueItem& q) {
      q.state = QueueItem::State::Cancelled;
      q.message = tr("cancelled before it started");
    });
    return;
  }
  if (RunController* c = controllerOf(id)) c->requestStop();
}

void QueueRunner::stopAllForShutdown() {
  shuttingDown_ = true;
  for (Slot* s : slots_)
    if (!s->itemId.isEmpty()) s->controller->requestStop();
  for (Slot* s : slots_)
    if (!s->itemId.isEmpty()) s->controller->shutdown();  // waits for the child (bounded)
}

}  // namespace studio
