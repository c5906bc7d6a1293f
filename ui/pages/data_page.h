// Data page: the run's dataset files and data options, the detected format of each file, statistics,
// and rendered examples token by token with the trained tokens highlighted.
#pragma once
#include <QTimer>
#include <QWidget>

#include "deltatune/data_preview.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;
class QTableWidget;
class QTextBrowser;

namespace studio {

class AppSettings;
class ImageStrip;
class RunDocument;

class DataPage : public QWidget {
  Q_OBJECT
 public:
  enum Column { PathColumn, UseColumn, TypeColumn, DetectedColumn, RowsColumn, ColumnCount };

  DataPage(RunDocument* doc, AppSettings* settings, QWidget* parent = nullptr);

  void addDataset(const QString& path, bool eval = false);
  void refreshPreview();  // runs preview_data in the background
  bool isPreviewing() const { return previewing_; }
  QString errorText() const;
  QTableWidget* table() const { return table_; }
  QTextBrowser* exampleView() const { return view_; }
  ImageStrip* imageStrip() const { return images_; }
  QLabel* exampleError() const { return exampleError_; }
  QString exampleSourceText() const;
  void selectExample(int index);  // 0-based
  const deltatune::DataPreview& preview() const { return preview_; }

 signals:
  void previewReady();
  void previewFailed(const QString& message);

 private:
  void loadFromConfig();
  void writeToConfig();
  void onConfigChanged(QObject* source);
  void showPreview();
  void showExample(int index);

  RunDocument* doc_;
  AppSettings* settings_;
  QTableWidget* table_;
  QCheckBox* trainOnInputs_;
  QCheckBox* skipBadRows_;
  QComboBox* truncation_;
  QComboBox* thinking_ = nullptr;
  QLabel* stats_;
  QLabel* error_;
  QSpinBox* exampleIndex_;
  QLabel* exampleSource_;
  QTextBrowser* view_;
  ImageStrip* images_;
  QLabel* exampleError_;
  QTimer debounce_;
  deltatune::DataPreview preview_;
  bool previewing_ = false;
  bool loading_ = false;
  int previewGeneration_ = 0;
};

}  // namespace studio
