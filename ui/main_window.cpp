#include "main_window.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QStackedWidget>
#include <QStatusBar>
#include <QStyle>
#include <QTimer>
#include <exception>

#include "app_settings.h"
#include "demo_paths.h"
#include "gpu_probe.h"
#include "pages/data_page.h"
#include "pages/experiments_page.h"
#include "pages/export_page.h"
#include "pages/model_page.h"
#include "pages/monitor_page.h"
#include "pages/playground_page.h"
#include "pages/queue_page.h"
#include "pages/train_page.h"
#include "deltatune/experiment_store.h"
#include "queue_runner.h"
#include "run_controller.h"
#include "run_document.h"
#include "run_queue.h"

namespace studio {


QString MainWindow::pageName(Page p) {
  switch (p) {
    case ModelPageIndex:
      return tr("Model");
    case DataPageIndex:
      return tr("Data");
    case TrainPageIndex:
      return tr("Train settings");
    case MonitorPageIndex:
      return tr("Monitor");
    case QueuePageIndex:
      return tr("Queue");
    case ExperimentsPageIndex:
      return tr("Experiments");
    case PlaygroundPageIndex:
      return tr("Playground");
    case ExportPageIndex:
      return tr("Export");
    case PageCount:
      break;
  }
  return {};
}

MainWindow::MainWindow(AppSettings* settings, QWidget* parent) : QMainWindow(parent), settings_(settings) {
  setWindowIcon(QIcon(QStringLiteral(":/icons/deltatune.svg")));
  doc_ = new RunDocument(this);
  controller_ = new RunController(this);
  gpus_ = new GpuProbe(this);

  modelPage_ = new ModelPage(doc_, settings_);
  dataPage_ = new DataPage(doc_, settings_);
  trainPage_ = new TrainPage(doc_, gpus_);
  monitorPage_ = new MonitorPage(doc_, controller_, settings_);
  queue_ = new RunQueue(this);
  const bool queueLoaded = queue_->load(queueFile());
  runner_ = new QueueRunner(queue_, this);
  runner_->setDatabasePath(settings_->databasePath());
  // The Monitor's own run and the queue's runs would share GPUs: one waits for the other.
  runner_->setBusyCheck([this] { return controller_->isActive(); });
  monitorPage_->setStartGuard([this]() -> QString {
    const int n = runner_->runningCount();
    return n > 0 ? tr("Queued runs are training (%1): pause the queue and wait for them, or queue this run "
                      "(Queue page).")
                       .arg(n)
                 : QString();
  });
  queuePage_ = new QueuePage(doc_, queue_, runner_, gpus_);
  experimentsPage_ = new ExperimentsPage(settings_);
  exportPage_ = new ExportPage(settings_);
  playgroundPage_ = new PlaygroundPage(settings_);

  auto* central = new QWidget;
  auto* layout = new QHBoxLayout(central);
  layout->setContentsMargins(6, 6, 6, 6);
  nav_ = new QListWidget;
  nav_->setFixedWidth(170);
  nav_->setIconSize(QSize(22, 22));
  nav_->setSpacing(2);
  const QStyle::StandardPixmap icons[] = {
      QStyle::SP_DirIcon,   QStyle::SP_FileIcon,           QStyle::SP_FileDialogDetailedView,
      QStyle::SP_MediaPlay, QStyle::SP_FileDialogContentsView, QStyle::SP_FileDialogListView,
      QStyle::SP_MessageBoxQuestion, QStyle::SP_DialogSaveButton};
  stack_ = new QStackedWidget;
  QWidget* pages[] = {modelPage_,       dataPage_,       trainPage_,      monitorPage_,
                      queuePage_,       experimentsPage_, playgroundPage_, exportPage_};
  for (int i = 0; i < PageCount; ++i) {
    nav_->addItem(new QListWidgetItem(style()->standardIcon(icons[i]), pageName(static_cast<Page>(i))));
    stack_->addWidget(pages[i]);
  }
  layout->addWidget(nav_);
  layout->addWidget(stack_, 1);
  setCentralWidget(central);

  runState_ = new QLabel(tr("idle"));
  statusBar()->addPermanentWidget(runState_);

  connect(nav_, &QListWidget::currentRowChanged, this, [this](int row) {
    stack_->setCurrentIndex(row);
    if (row == ExperimentsPageIndex) experimentsPage_->refresh();
    if (row == ExportPageIndex) exportPage_->refresh();
    if (row == PlaygroundPageIndex) playgroundPage_->refreshRuns();
  });
  connect(doc_, &RunDocument::filePathChanged, this, &MainWindow::updateTitle);
  connect(trainPage_, &TrainPage::errorOccurred, this, &MainWindow::showError);
  connect(queue_, &RunQueue::saveFailed, this, &MainWindow::showError);
  connect(runner_, &QueueRunner::runningChanged, monitorPage_, &MonitorPage::setQueueRunning);
  connect(runner_, &QueueRunner::runningChanged, this, [this] {
    if (stack_->currentIndex() == ExperimentsPageIndex) experimentsPage_->refresh();
  });
  connect(monitorPage_, &MonitorPage::runListChanged, this, [this] {
    if (stack_->currentIndex() == ExperimentsPageIndex) experimentsPage_->refresh();
  });
  connect(experimentsPage_, &ExperimentsPage::exportRequested, this, [this](const QString& id) {
    showPage(ExportPageIndex);
    exportPage_->selectRun(id);
  });
  auto loadRunConfig = [this](const QString& yaml) {
    try {
      doc_->setFilePath(QString());
      doc_->loadYaml(yaml);  // stored configs hold absolute paths
      return true;
    } catch (const std::exception& e) {
      showError(tr("The run's config cannot be loaded: %1").arg(QString::fromUtf8(e.what())));
      return false;
    }
  };
  connect(experimentsPage_, &ExperimentsPage::openConfigRequested, this,
          [this, loadRunConfig](const QString&, const QString& yaml) {
            if (loadRunConfig(yaml)) showPage(TrainPageIndex);
          });
  connect(experimentsPage_, &ExperimentsPage::resumeRequested, this,
          [this, loadRunConfig](const QString& id, const QString& yaml) {
            if (controller_->isActive()) {
              showError(tr("A run is already in progress."));
              return;
            }
            if (!loadRunConfig(yaml)) return;
            showPage(MonitorPageIndex);
            monitorPage_->resumeRun(id);
          });
  connect(controller_, &RunController::stateChanged, this, [this](RunController::State s) {
    static const char* names[] = {"idle", "running", "paused", "stopping"};
    runState_->setText(tr("engine: %1").arg(QLatin1String(names[static_cast<int>(s)])));
  });
  connect(controller_, &RunController::runFinished, this,
          [this](const QString& status, const QString& message) {
            QTimer::singleShot(0, runner_, &QueueRunner::schedule);  // the queue waited for this run
            if (closeWhenStopped_) {
              close();
              return;
            }
            if (status == "failed") statusBar()->showMessage(tr("Run failed: %1").arg(message), 15000);
          });

  buildMenus();
  restoreGeometry(settings_->windowGeometry());
  if (settings_->windowGeometry().isEmpty()) resize(1400, 900);
  showPage(static_cast<Page>(std::clamp(settings_->lastPage(), 0, PageCount - 1)));
  updateTitle();
  gpus_->refresh();
  if (!queueLoaded) QTimer::singleShot(0, this, [this] { showError(queue_->errorString()); });
}

QString MainWindow::queueFile() const {
  const QString db = settings_->databasePath().isEmpty()
                         ? QString::fromStdString(deltatune::ExperimentStore::default_path())
                         : settings_->databasePath();
  return QFileInfo(db).absolutePath() + QStringLiteral("/queue.json");
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New run"), QKeySequence::New, this, &MainWindow::newRun);
  file->addAction(tr("&Open run file…"), QKeySequence::Open, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open run file"), QString(), tr("Run files (*.yaml *.yml)"));
    if (!path.isEmpty()) openRunFile(path);
  });
  QMenu* recent = file->addMenu(tr("Open &recent"));
  connect(recent, &QMenu::aboutToShow, this, [this, recent] {
    recent->clear();
    for (const QString& f : settings_->recentRunFiles())
      recent->addAction(f, this, [this, f] { openRunFile(f); });
    if (recent->isEmpty()) recent->addAction(tr("(none)"))->setEnabled(false);
  });
  file->addAction(tr("Open the &demo run"), this, &MainWindow::openDemo)
      ->setEnabled(!demoRunFile().isEmpty());
  file->addSeparator();
  file->addAction(tr("&Save run"), QKeySequence::Save, this, &MainWindow::saveRun);
  file->addAction(tr("Save run &as…"), QKeySequence::SaveAs, this, &MainWindow::saveRunAs);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (int i = 0; i < PageCount; ++i)
    view->addAction(pageName(static_cast<Page>(i)), QKeySequence(QString("Ctrl+%1").arg(i + 1)), this,
                    [this, i] { showPage(static_cast<Page>(i)); });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About DeltaTune"), this, [this] {
    QMessageBox::about(this, tr("About DeltaTune"),
                       tr("<b>DeltaTune Studio %1</b><p>LoRA fine-tuning of Qwen3.5 (Gated DeltaNet + gated "
                          "attention) with an in-process C++ engine.</p>")
                           .arg(QStringLiteral(DT_VERSION)));
  });
}

void MainWindow::showPage(Page p) {
  nav_->setCurrentRow(p);
}

void MainWindow::updateTitle() {
  const QString f = doc_->filePath();
  setWindowTitle(f.isEmpty() ? tr("DeltaTune Studio")
                             : tr("%1 — DeltaTune Studio").arg(QFileInfo(f).fileName()));
  statusBar()->showMessage(f.isEmpty() ? tr("Unsaved run") : f);
}

bool MainWindow::openRunFile(const QString& path) {
  try {
    doc_->loadFile(path);
  } catch (const std::exception& e) {
    showError(tr("Cannot open %1: %2").arg(path, QString::fromUtf8(e.what())));
    return false;
  }
  settings_->addRecentRunFile(QFileInfo(path).absoluteFilePath());
  return true;
}

bool MainWindow::openDemo() {
  const QString f = demoRunFile();
  if (f.isEmpty() || !openRunFile(f)) return false;
  // The demo's own folder is read-only after a package install, and a source tree is no place for runs:
  // the demo writes under the user's data folder.
  deltatune::RunConfig cfg = doc_->config();
  cfg.output_dir = demoOutputDir().toStdString();
  doc_->setConfig(cfg);
  return true;
}

void MainWindow::newRun() {
  doc_->setFilePath(QString());
  doc_->setConfig(deltatune::RunConfig{});
  showPage(ModelPageIndex);
}

bool MainWindow::saveRun() {
  if (doc_->filePath().isEmpty()) return saveRunAs();
  try {
    doc_->saveFile(doc_->filePath());
  } catch (const std::exception& e) {
    showError(QString::fromUtf8(e.what()));
    return false;
  }
  statusBar()->showMessage(tr("Saved %1").arg(doc_->filePath()), 5000);
  return true;
}

bool MainWindow::saveRunAs() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save run file"), doc_->filePath(),
                                                    tr("Run files (*.yaml *.yml)"));
  if (path.isEmpty()) return false;
  try {
    doc_->saveFile(path);
  } catch (const std::exception& e) {
    showError(QString::fromUtf8(e.what()));
    return false;
  }
  settings_->addRecentRunFile(path);
  return true;
}

void MainWindow::showError(const QString& message) {
  statusBar()->showMessage(message, 15000);
  if (!QGuiApplication::platformName().startsWith(QLatin1String("offscreen")))
    QMessageBox::warning(this, tr("DeltaTune"), message);
}

QStringList MainWindow::grabPages(const QString& dir) {
  QDir().mkpath(dir);
  QStringList files;
  const int current = stack_->currentIndex();
  for (int i = 0; i < PageCount; ++i) {
    showPage(static_cast<Page>(i));
    QApplication::processEvents();
    const QString name = pageName(static_cast<Page>(i)).toLower().replace(' ', '_');
    const QString path = QString("%1/%2_%3.png").arg(dir).arg(i + 1, 2, 10, QChar('0')).arg(name);
    if (grab().save(path)) files << path;
  }
  showPage(static_cast<Page>(current));
  return files;
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (runner_->runningCount() > 0 && !closeWhenStopped_) {
    const auto answer = QMessageBox::question(
        this, tr("Queued runs are training"),
        tr("Queued runs are training (%1). Stop them at their next step (a checkpoint each; they resume when "
           "the queue runs again) and quit?")
            .arg(runner_->runningCount()));
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
    statusBar()->showMessage(tr("Stopping the queued runs…"));
    runner_->stopAllForShutdown();
  }
  if (controller_->isActive()) {
    if (!closeWhenStopped_) {
      const auto answer = QMessageBox::question(this, tr("A run is in progress"),
                                                tr("Stop the run at the next step boundary (a checkpoint is "
                                                   "written, it can be resumed) and quit?"));
      if (answer != QMessageBox::Yes) {
        event->ignore();
        return;
      }
      closeWhenStopped_ = true;
      controller_->requestStop();
      statusBar()->showMessage(tr("Stopping the run, then quitting…"));
    }
    event->ignore();  // closes again when runFinished arrives; the UI stays responsive meanwhile
    return;
  }
  settings_->setWindowGeometry(saveGeometry());
  settings_->setLastPage(stack_->currentIndex());
  settings_->sync();
  controller_->shutdown();  // quit() and wait() for the (idle) engine thread
  event->accept();
}

}  // namespace studio
