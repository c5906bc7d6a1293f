// Model page: choose a checkpoint folder (recent list), see what it is (architecture, layer pattern,
// parameter counts, dtypes, tokenizer/chat template) and any warnings, before any weight is loaded.
#pragma once
#include <QWidget>

#include "deltatune/model_info.h"

class QComboBox;
class QLabel;
class QTableWidget;
class QPushButton;

namespace studio {

class AppSettings;
class LayerStrip;
class RunDocument;

class ModelPage : public QWidget {
  Q_OBJECT
 public:
  ModelPage(RunDocument* doc, AppSettings* settings, QWidget* parent = nullptr);

  void loadModel(const QString& dir);  // sets base_model and reads the folder in the background
  bool isLoading() const { return loading_; }
  QString errorText() const;
  LayerStrip* layerStrip() const { return strip_; }
  QWidget* visionBox() const { return visionBox_; }   // hidden for a text-only checkpoint
  QString visionText() const;

 signals:
  void modelLoaded(const QString& dir);
  void modelFailed(const QString& message);

 private:
  void onBrowse();
  void onConfigChanged(QObject* source);
  void startLoad(const QString& dir);
  void showInfo(const deltatune::ModelInfo& info);
  void showVision(const deltatune::ModelInfo& info);
  void showError(const QString& message);
  void refreshRecent();

  RunDocument* doc_;
  AppSettings* settings_;
  QComboBox* folder_;
  QPushButton* loadButton_;
  QLabel* status_;
  QLabel* summary_;
  LayerStrip* strip_;
  QLabel* stripLegend_;
  QTableWidget* params_;
  QLabel* files_;
  QWidget* visionBox_;
  QLabel* vision_;
  QLabel* warnings_;
  QString loadedDir_;
  QString pendingDir_;
  bool loading_ = false;
};

}  // namespace studio
