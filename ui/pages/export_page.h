// Export page: a PEFT adapter folder or a merged full checkpoint from any run's checkpoint or adapter,
// with a progress bar. The export runs off the UI thread.
#pragma once
#include "store_handle.h"
#include <QWidget>
#include <memory>

#include "deltatune/experiment_store.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;

namespace studio {

class AppSettings;

class ExportPage : public QWidget {
  Q_OBJECT
 public:
  ExportPage(AppSettings* settings, QWidget* parent = nullptr);
  ~ExportPage() override;

  bool isExporting() const { return exporting_; }
  QString statusText() const;
  QProgressBar* progressBar() const { return progress_; }

 public slots:
  void refresh();
  void selectRun(const QString& runId);
  void setOutputDir(const QString& dir);
  void setMerged(bool merged);
  bool startExport();

 signals:
  void exportFinished(bool ok, const QString& message);

 private:
  void onRunChanged();
  deltatune::ExperimentStore* store();

  AppSettings* settings_;
  StoreHandle store_;
  QComboBox* run_;
  QComboBox* source_;
  QLineEdit* baseModel_;
  QRadioButton* adapter_;
  QRadioButton* merged_;
  QComboBox* modelClass_;
  QLineEdit* outDir_;
  QPushButton* exportButton_;
  QProgressBar* progress_;
  QLabel* status_;
  bool exporting_ = false;
};

}  // namespace studio
