// Queue page: runs waiting to train (the current settings, or a grid of them), their order and state,
// and where they run: one after another, or side by side on the GPUs picked here.
#pragma once
#include <QList>
#include <QWidget>

#include "grid_sweep.h"

class QCheckBox;
class QHBoxLayout;
class QLabel;
class QPushButton;
class QTableView;

namespace studio {

class GpuProbe;
class QueueRunner;
class RunDocument;
class RunQueue;

class QueuePage : public QWidget {
  Q_OBJECT
 public:
  QueuePage(RunDocument* doc, RunQueue* queue, QueueRunner* runner, GpuProbe* gpus, QWidget* parent = nullptr);

  QTableView* view() const { return view_; }
  QString noteText() const;
  QList<QCheckBox*> gpuChecks() const { return gpuChecks_; }

 public slots:
  bool addCurrentRun();
  int addRuns(const QList<SweepRun>& runs);  // returns how many were queued
  void openGridDialog();
  void moveSelected(int delta);
  void cancelSelected();
  void removeSelected();

 signals:
  void errorOccurred(const QString& message);

 private:
  QString selectedId() const;
  void updateGpuChecks();
  void updateButtons();
  void showNote(const QString& text, bool error);

  RunDocument* doc_;
  RunQueue* queue_;
  QueueRunner* runner_;
  GpuProbe* gpus_;
  QTableView* view_;
  QPushButton* runButton_;
  QPushButton* up_;
  QPushButton* down_;
  QPushButton* cancel_;
  QPushButton* remove_;
  QHBoxLayout* gpuRow_;
  QLabel* gpuHint_;
  QList<QCheckBox*> gpuChecks_;
  QLabel* summary_;
  QLabel* emptyHint_;
  QLabel* note_;
};

}  // namespace studio
