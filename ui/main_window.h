// The studio window: a page list on the left (Model, Data, Train settings, Monitor, Queue, Experiments,
// Playground, Export) over one RunDocument, a RunController for the engine, the run queue and its runner, and File
// menu handling of run files.
#pragma once
#include <QMainWindow>

class QListWidget;
class QStackedWidget;
class QLabel;

namespace studio {

class AppSettings;
class DataPage;
class ExperimentsPage;
class ExportPage;
class GpuProbe;
class ModelPage;
class PlaygroundPage;
class MonitorPage;
class QueuePage;
class QueueRunner;
class RunController;
class RunDocument;
class RunQueue;
class TrainPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum Page {
    ModelPageIndex,
    DataPageIndex,
    TrainPageIndex,
    MonitorPageIndex,
    QueuePageIndex,
    ExperimentsPageIndex,
    PlaygroundPageIndex,
    ExportPageIndex,
    PageCount
  };

  explicit MainWindow(AppSettings* settings, QWidget* parent = nullptr);
  ~MainWindow() override;

  RunDocument* document() const { return doc_; }
  RunController* controller() const { return controller_; }
  ModelPage* modelPage() const { return modelPage_; }
  DataPage* dataPage() const { return dataPage_; }
  TrainPage* trainPage() const { return trainPage_; }
  MonitorPage* monitorPage() const { return monitorPage_; }
  QueuePage* queuePage() const { return queuePage_; }
  RunQueue* runQueue() const { return queue_; }
  QueueRunner* queueRunner() const { return runner_; }
  // queue.json next to the experiment database.
  QString queueFile() const;
  ExperimentsPage* experimentsPage() const { return experimentsPage_; }
  ExportPage* exportPage() const { return exportPage_; }
  PlaygroundPage* playgroundPage() const { return playgroundPage_; }

  void showPage(Page p);
  static QString pageName(Page p);
  // Saves a PNG of every page (NN_name.png) into `dir`; returns the files written.
  QStringList grabPages(const QString& dir);

 public slots:
  bool openRunFile(const QString& path);
  bool openDemo();
  void newRun();
  bool saveRun();
  bool saveRunAs();
  void showError(const QString& message);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildMenus();
  void updateTitle();

  AppSettings* settings_;
  RunDocument* doc_;
  RunController* controller_;
  GpuProbe* gpus_;
  QListWidget* nav_;
  QStackedWidget* stack_;
  QLabel* runState_;
  ModelPage* modelPage_;
  DataPage* dataPage_;
  TrainPage* trainPage_;
  MonitorPage* monitorPage_;
  QueuePage* queuePage_;
  RunQueue* queue_;
  QueueRunner* runner_;
  ExperimentsPage* experimentsPage_;
  ExportPage* exportPage_;
  PlaygroundPage* playgroundPage_;
  bool closeWhenStopped_ = false;
};

}  // namespace studio
