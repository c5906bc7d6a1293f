// The run queue: runs waiting to train one after another (or side by side, one per GPU; QueueRunner does
// the running). Each entry holds its whole run config as YAML. The queue is saved atomically to a JSON file
// after every change (queue.json next to the experiment database), so queued runs survive a restart.
#pragma once
#include <QAbstractTableModel>
#include <QList>
#include <QString>
#include <functional>

namespace studio {

struct QueueItem {
  enum class State { Queued, Running, Done, Failed, Cancelled };

  QString id;          // the entry's own id (8 hex digits), not the run's
  QString name;        // the run's name
  QString configYaml;  // canonical run YAML (absolute paths)
  State state = State::Queued;
  QString runId;       // the experiment database's run id once it started
  QString resumeRun;   // continue this run instead of starting anew (an entry interrupted by a shutdown)
  QString message;     // why it failed / was cancelled
  int gpu = -1;        // the GPU it runs on (side by side), -1 = as its config says
  qint64 step = 0, totalSteps = 0;
  double loss = -1;

  static QString stateName(State s);  // queued | running | done | failed | cancelled
  static State stateFromName(const QString& name, bool* ok = nullptr);
};

class RunQueue : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Order, Name, State, Gpu, Progress, RunId, Message, ColumnCount };

  explicit RunQueue(QObject* parent = nullptr);

  // Reads `file` (missing = empty queue) and saves there from now on. An entry left `running` by a studio
  // that ended without stopping it is queued again to resume its run. False (and errorString()) when the
  // file exists but cannot be read; the queue is then empty and saving stays off so the file is kept.
  bool load(const QString& file);
  QString file() const { return file_; }
  QString errorString() const { return error_; }

  const QList<QueueItem>& items() const { return items_; }
  const QueueItem* item(int row) const;
  int rowOfId(const QString& id) const;
  int count(QueueItem::State s) const;

  // Appends entries (new ids); returns their ids.
  QStringList add(const QList<QueueItem>& items);
  // Only entries that are not running.
  bool remove(const QString& id);
  int removeFinished();  // done, failed and cancelled entries
  bool move(const QString& id, int delta);  // -1 = earlier, +1 = later
  // The first queued entry whose id is not in `skip`.
  QString nextQueued(const QStringList& skip = {}) const;
  // Changes one entry and saves.
  void update(const QString& id, const std::function<void(QueueItem&)>& change);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 signals:
  void saveFailed(const QString& message);

 private:
  void save();

  QList<QueueItem> items_;
  QString file_;
  QString error_;
};

}  // namespace studio
