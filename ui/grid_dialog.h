// "Queue a grid" dialog: pick up to four keys, type a list of values for each, see the runs it makes
// (the cartesian product) and queue them.
#pragma once
#include <QDialog>
#include <QList>

#include "grid_sweep.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;

namespace studio {

// "1 run", "4 runs".
QString runsText(int n);

class GridDialog : public QDialog {
  Q_OBJECT
 public:
  explicit GridDialog(const deltatune::RunConfig& base, QWidget* parent = nullptr);

  static constexpr int kAxes = 4;
  // Sets row `i` (tests and presets).
  void setAxis(int i, const QString& key, const QString& values);
  QList<SweepAxis> axes() const;
  const QList<SweepRun>& runs() const { return runs_; }  // valid when the error text is empty
  QString errorText() const;

 private:
  void updatePreview();

  deltatune::RunConfig base_;
  QList<QComboBox*> keys_;
  QList<QLineEdit*> values_;
  QListWidget* preview_;
  QLabel* count_;
  QLabel* error_;
  QPushButton* ok_;
  QList<SweepRun> runs_;
};

}  // namespace studio
