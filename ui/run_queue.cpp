#include "run_queue.h"

#include <QBrush>
#include <QColor>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QSaveFile>

namespace studio {

namespace {
constexpr int kFormatVersion = 1;

QString newId() {
  return QStringLiteral("%1").arg(QRandomGenerator::global()->generate(), 8, 16, QChar('0'));
}
}  // namespace

QString QueueItem::stateName(State s) {
  switch (s) {
    case State::Queued:
      return QStringLiteral("queued");
    case State::Running:
      return QStringLiteral("running");
    case State::Done:
      return QStringLiteral("done");
    case State::Failed:
      return QStringLiteral("failed");
    case State::Cancelled:
      return QStringLiteral("cancelled");
  }
  return {};
}

QueueItem::State QueueItem::stateFromName(const QString& name, bool* ok) {
  for (State s : {State::Queued, State::Running, State::Done, State::Failed, State::Cancelled}) {
    if (stateName(s) == name) {
      if (ok) *ok = true;
      return s;
    }
  }
  if (ok) *ok = false;
  return State::Queued;
}

RunQueue::RunQueue(QObject* parent) : QAbstractTableModel(parent) {}

bool RunQueue::load(const QString& file) {
  beginResetModel();
  items_.clear();
  file_.clear();
  error_.clear();
  QFile f(file);
  bool ok = true;
  if (f.exists()) {
    QJsonParseError pe;
    const QJsonDocument doc = f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll(), &pe)
                                                          : QJsonDocument();
    if (!f.isOpen()) {
      error_ = tr("cannot read the run queue %1: %2").arg(file, f.errorString());
      ok = false;
    } else if (pe.error != QJsonParseError::NoError || !doc.isObject()) {
      error_ = tr("the run queue %1 is not valid JSON (%2); it is left as it is").arg(file, pe.errorString());
      ok = false;
    } else {
      for (const QJsonValue& v : doc.object().value(QStringLiteral("runs")).toArray()) {
        const QJsonObject o = v.toObject();
        QueueItem it;
        it.id = o.value(QStringLiteral("id")).toString();
        it.name = o.value(QStringLiteral("name")).toString();
        it.configYaml = o.value(QStringLiteral("config")).toString();
        bool known = false;
        it.state = QueueItem::stateFromName(o.value(QStringLiteral("state")).toString(), &known);
        it.runId = o.value(QStringLiteral("run_id")).toString();
        it.resumeRun = o.value(QStringLiteral("resume_run")).toString();
        it.message = o.value(QStringLiteral("message")).toString();
        it.step = o.value(QStringLiteral("step")).toInteger();
        it.totalSteps = o.value(QStringLiteral("total_steps")).toInteger();
        if (it.id.isEmpty() || it.configYaml.isEmpty() || !known) continue;
        if (it.state == QueueItem::State::Running) {
          // The studio ended while it ran: continue the run from its checkpoint when the queue runs again.
          it.state = QueueItem::State::Queued;
          if (!it.runId.isEmpty()) it.resumeRun = it.runId;
          it.message = it.runId.isEmpty() ? tr("interrupted before it started; queued again")
                                           : tr("interrupted; will resume run %1").arg(it.runId);
        }
        it.gpu = -1;
        items_.append(it);
      }
    }
  }
  if (ok) file_ = file;
  endResetModel();
  return ok;
}

void RunQueue::save() {
  if (file_.isEmpty()) return;
  QJsonArray runs;
  for (const QueueItem& it : items_) {
    runs.append(QJsonObject{{"id", it.id},
                            {"name", it.name},
                            {"config", it.configYaml},
                            {"state", QueueItem::stateName(it.state)},
                            {"run_id", it.runId},
                            {"resume_run", it.resumeRun},
                            {"message", it.message},
                            {"step", it.step},
                            {"total_steps", it.totalSteps}});
  }
  const QJsonObject root{{"format", "deltatune-run-queue"}, {"version", kFormatVersion}, {"runs", runs}};
  QDir().mkpath(QFileInfo(file_).absolutePath());
  QSaveFile f(file_);
  if (!f.open(QIODevice::WriteOnly) || f.write(QJsonDocument(root).toJson()) < 0 || !f.commit())
    emit saveFailed(tr("cannot save the run queue %1: %2").arg(file_, f.errorString()));
}

const QueueItem* RunQueue::item(int row) const {
  return row >= 0 && row < items_.size() ? &items_[row] : nullptr;
}

int RunQueue::rowOfId(const QString& id) const {
  for (int i = 0; i < items_.size(); ++i)
    if (items_[i].id == id) return i;
  return -1;
}

int RunQueue::count(QueueItem::State s) const {
  int n = 0;
  for (const QueueItem& it : items_) n += it.state == s ? 1 : 0;
  return n;
}

QStringList RunQueue::add(const QList<QueueItem>& items) {
  if (items.isEmpty()) return {};
  QStringList ids;
  beginInsertRows({}, static_cast<int>(items_.size()), static_cast<int>(items_.size() + items.size() - 1));
  for (QueueItem it : items) {
    do {
      it.id = newId();
    } while (rowOfId(it.id) >= 0);
    it.state = QueueItem::State::Queued;
    ids << it.id;
    items_.append(it);
  }
  endInsertRows();
  save();
  return ids;
}

bool RunQueue::remove(const QString& id) {
  const int row = rowOfId(id);
  if (row < 0 || items_[row].state == QueueItem::State::Running) return false;
  beginRemoveRows({}, row, row);
  items_.removeAt(row);
  endRemoveRows();
  save();
  return true;
}

int RunQueue::removeFinished() {
  int n = 0;
  for (int row = static_cast<int>(items_.size()) - 1; row >= 0; --row) {
    const auto s = items_[row].state;
    if (s == QueueItem::State::Queued || s == QueueItem::State::Running) continue;
    beginRemoveRows({}, row, row);
    items_.removeAt(row);
    endRemoveRows();
    ++n;
  }
  if (n) save();
  return n;
}

bool RunQueue::move(const QString& id, int delta) {
  const int row = rowOfId(id);
  const int to = row + delta;
  if (row < 0 || delta == 0 || to < 0 || to >= items_.size()) return false;
  // beginMoveRows wants the destination as "insert before" in the old numbering.
  beginMoveRows({}, row, row, {}, delta > 0 ? to + 1 : to);
  items_.move(row, to);
  endMoveRows();
  emit dataChanged(index(std::min(row, to), Order), index(std::max(row, to), Order));
  save();
  return true;
}

QString RunQueue::nextQueued(const QStringList& skip) const {
  for (const QueueItem& it : items_)
    if (it.state == QueueItem::State::Queued && !skip.contains(it.id)) return it.id;
  return {};
}

void RunQueue::update(const QString& id, const std::function<void(QueueItem&)>& change) {
  const int row = rowOfId(id);
  if (row < 0) return;
  change(items_[row]);
  emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
  save();
}

int RunQueue::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(items_.size());
}
int RunQueue::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunQueue::data(const QModelIndex& index, int role) const {
  const QueueItem* it = item(index.row());
  if (!it) return {};
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Order:
        return index.row() + 1;
      case Name:
        return it->name;
      case State:
        return QueueItem::stateName(it->state);
      case Gpu:
        return it->gpu >= 0 ? QString::number(it->gpu) : QString();
      case Progress:
        if (it->totalSteps <= 0) return QString();
        return it->loss >= 0 ? tr("%1 / %2 · loss %3").arg(it->step).arg(it->totalSteps).arg(it->loss, 0, 'f', 4)
                             : tr("%1 / %2").arg(it->step).arg(it->totalSteps);
      case RunId:
        return it->runId;
      case Message:
        return it->message;
    }
  }
  if (role == Qt::ForegroundRole && index.column() == State) {
    switch (it->state) {
      case QueueItem::State::Running:
        return QBrush(QColor(0x1f, 0x77, 0xb4));
      case QueueItem::State::Done:
        return QBrush(QColor(0x2c, 0x7a, 0x2c));
      case QueueItem::State::Failed:
        return QBrush(QColor(0xb0, 0x00, 0x20));
      case QueueItem::State::Cancelled:
        return QBrush(QColor(0xa0, 0x5a, 0x00));
      case QueueItem::State::Queued:
        break;
    }
  }
  if (role == Qt::ToolTipRole && index.column() == Message) return it->message;
  return {};
}

QVariant RunQueue::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Order:
      return tr("#");
    case Name:
      return tr("Run");
    case State:
      return tr("State");
    case Gpu:
      return tr("GPU");
    case Progress:
      return tr("Progress");
    case RunId:
      return tr("Run id");
    case Message:
      return tr("Message");
  }
  return {};
}

}  // namespace studio
