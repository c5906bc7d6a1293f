// Runs of the experiment database as a table. Sorting uses SortRole (numbers sort as numbers).
#pragma once
#include <QAbstractTableModel>
#include <vector>

#include "deltatune/experiment_store.h"

namespace studio {

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Name,
    Status,
    Model,
    Rank,
    LearningRate,
    Steps,
    FinalLoss,
    BestEvalLoss,
    Duration,
    Created,
    Tags,
    Id,
    ColumnCount
  };
  static constexpr int SortRole = Qt::UserRole + 1;
  static constexpr int RunIdRole = Qt::UserRole + 2;

  explicit RunsTableModel(QObject* parent = nullptr);

  void setRuns(std::vector<deltatune::RunRecord> runs);
  const std::vector<deltatune::RunRecord>& runs() const { return runs_; }
  const deltatune::RunRecord* runAt(int row) const;
  int rowOfId(const QString& id) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // Seconds between created_at and finished_at (or now for a running run); < 0 when unknown.
  static double durationSeconds(const deltatune::RunRecord& r);

 private:
  std::vector<deltatune::RunRecord> runs_;
};

}  // namespace studio
