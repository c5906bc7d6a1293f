#include "runs_table_model.h"

#include <QBrush>
#include <QColor>
#include <QDateTime>
#include <QFileInfo>

#include "format.h"
#include "yaml_blocks.h"

namespace studio {

namespace {
QString configValue(const deltatune::RunRecord& r, const QString& key) {
  for (const YamlBlock& b : yamlBlocks(QString::fromStdString(r.config_yaml)))
    if (b.key == key) return b.text.trimmed();
  return {};
}
QDateTime parseTime(const std::string& s) {
  QDateTime t = QDateTime::fromString(QString::fromStdString(s), Qt::ISODate);
  if (!t.isValid())
    t = QDateTime::fromString(QString::fromStdString(s), QStringLiteral("yyyy-MM-dd HH:mm:ss"));
  if (t.isValid() && t.timeSpec() == Qt::LocalTime) t.setTimeSpec(Qt::UTC);  // the store writes UTC
  return t;
}
}  // namespace

RunsTableModel::RunsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsTableModel::setRuns(std::vector<deltatune::RunRecord> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  endResetModel();
}

const deltatune::RunRecord* RunsTableModel::runAt(int row) const {
  return row >= 0 && row < static_cast<int>(runs_.size()) ? &runs_[static_cast<size_t>(row)] : nullptr;
}

int RunsTableModel::rowOfId(const QString& id) const {
  for (size_t i = 0; i < runs_.size(); ++i)
    if (QString::fromStdString(runs_[i].id) == id) return static_cast<int>(i);
  return -1;
}

int RunsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}
int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

double RunsTableModel::durationSeconds(const deltatune::RunRecord& r) {
  const QDateTime a = parseTime(r.created_at);
  if (!a.isValid()) return -1;
  QDateTime b = parseTime(r.finished_at);
  if (!b.isValid()) {
    if (r.status != "running") return -1;
    b = QDateTime::currentDateTimeUtc();
  }
  return static_cast<double>(a.msecsTo(b)) / 1000.0;
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  const deltatune::RunRecord* r = runAt(index.row());
  if (!r) return {};
  if (role == RunIdRole) return QString::fromStdString(r->id);
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort && role != Qt::ToolTipRole && role != Qt::ForegroundRole) return {};
  if (role == Qt::ForegroundRole) {
    if (index.column() != Status) return {};
    if (r->status == "failed" || r->status == "crashed") return QBrush(QColor(0xb0, 0x00, 0x20));
    if (r->status == "running") return QBrush(QColor(0x1f, 0x77, 0xb4));
    if (r->status == "finished") return QBrush(QColor(0x2c, 0x7a, 0x2c));
    return {};
  }
  switch (static_cast<Column>(index.column())) {
    case Name:
      return QString::fromStdString(r->name.empty() ? r->id : r->name);
    case Status:
      return QString::fromStdString(r->status);
    case Model:
      if (role == Qt::ToolTipRole) return QString::fromStdString(r->model);
      return QFileInfo(QString::fromStdString(r->model)).fileName();
    case Rank: {
      const QString v = configValue(*r, QStringLiteral("lora_r"));
      return sort ? QVariant(v.toInt()) : QVariant(v);
    }
    case LearningRate: {
      const QString v = configValue(*r, QStringLiteral("learning_rate"));
      return sort ? QVariant(v.toDouble()) : QVariant(v);
    }
    case Steps:
      if (sort) return static_cast<qlonglong>(r->steps);
      return r->total_steps > 0 ? QString("%1 / %2").arg(r->steps).arg(r->total_steps)
                                : QString::number(r->steps);
    case FinalLoss:
      return sort ? QVariant(r->final_loss) : QVariant(formatLoss(r->final_loss));
    case BestEvalLoss:
      return sort ? QVariant(r->best_eval_loss) : QVariant(formatLoss(r->best_eval_loss));
    case Duration: {
      const double d = durationSeconds(*r);
      return sort ? QVariant(d) : QVariant(formatDuration(d));
    }
    case Created: {
      const QDateTime t = parseTime(r->created_at);
      if (sort) return t.isValid() ? QVariant(t.toMSecsSinceEpoch()) : QVariant(0);
      return t.isValid() ? t.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                         : QString::fromStdString(r->created_at);
    }
    case Tags: {
      QStringList tags;
      for (const auto& t : r->tags) tags << QString::fromStdString(t);
      return tags.join(QStringLiteral(", "));
    }
    case Id:
      return QString::fromStdString(r->id);
    case ColumnCount:
      break;
  }
  return {};
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (static_cast<Column>(section)) {
    case Name:
      return tr("Name");
    case Status:
      return tr("Status");
    case Model:
      return tr("Model");
    case Rank:
      return tr("r");
    case LearningRate:
      return tr("LR");
    case Steps:
      return tr("Steps");
    case FinalLoss:
      return tr("Final loss");
    case BestEvalLoss:
      return tr("Best eval");
    case Duration:
      return tr("Duration");
    case Created:
      return tr("Created");
    case Tags:
      return tr("Tags");
    case Id:
      return tr("Id");
    case ColumnCount:
      break;
  }
  return {};
}

}  // namespace studio
