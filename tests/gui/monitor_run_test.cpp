// A real demo run on the CPU backend driven from the Monitor page: plots and the experiment database
// fill while it runs; pause holds it; stop checkpoints it; resume finishes it; export writes an adapter.
#include <qcustomplot.h>

#include <QFileInfo>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "gui_test_util.h"
#include "live_plots.h"
#include "main_window.h"
#include "pages/experiments_page.h"
#include "pages/export_page.h"
#include "pages/monitor_page.h"
#include "run_controller.h"
#include "run_document.h"
#include "runs_table_model.h"

using namespace studio;

class MonitorRunTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::unique_ptr<AppSettings> settings_;
  std::unique_ptr<MainWindow> window_;
  int steps_ = 0;
  int64_t lastStep_ = 0;

  MonitorPage* monitor() { return window_->monitorPage(); }
  RunController* controller() { return window_->controller(); }
  std::string dbPath() const { return (tmp_.path() + "/experiments.db").toStdString(); }

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    settings_ = std::make_unique<AppSettings>(tmp_.path() + "/settings.ini");
    window_ = std::make_unique<MainWindow>(settings_.get());
    window_->resize(1400, 900);
    window_->show();
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 16);
    cfg.save_steps = 4;
    cfg.eval_steps = 4;
    window_->document()->setConfig(cfg);
    connect(controller(), &RunController::stepReported, this, [this](const deltatune::StepMetrics& m) {
      ++steps_;
      lastStep_ = m.step;
    });
  }

  void startUpdatesPlotsAndDatabase() {
    QSignalSpy started(controller(), &RunController::runStarted);
    QVERIFY(monitor()->start());
    QVERIFY(controller()->isActive());
    QVERIFY2(guitest::waitFor([&] { return steps_ >= 3 || !controller()->isActive(); }, 300000),
             qPrintable(monitor()->logText()));
    QVERIFY2(controller()->isActive(), qPrintable("run ended early: " + monitor()->logText()));
    QCOMPARE(started.count(), 1);
    const QString runId = monitor()->lastRunId();
    QVERIFY(!runId.isEmpty());
    // The coalescing timer draws within a frame or two.
    QVERIFY(guitest::waitFor([&] { return monitor()->plots()->pointCount(Metric::Loss) >= 3; }, 2000));
    QVERIFY(monitor()->plots()->pointCount(Metric::LearningRate) >= 3);
    QVERIFY(monitor()->plots()->replotCount() >= 1);
    // On the CPU backend the memory plot says it shows host RAM, and its axis spans the data (a few MiB held
    // by the same tensors every step), not a range that grows with every repaint.
    QVERIFY2(monitor()->plots()->memoryTitle().contains("CPU"), qPrintable(monitor()->plots()->memoryTitle()));
    QCustomPlot* memory = monitor()->plots()->plots().at(4);
    const QCPRange y = memory->yAxis->range();
    bool has = false;
    const QCPRange data = memory->graph(0)->getValueRange(has);
    QVERIFY(has && data.upper > 0);
    QVERIFY2(y.lower >= 0 && y.upper >= data.upper && y.upper <= 3 * data.upper,
             qPrintable(QString("memory axis %1..%2 GiB for data up to %3").arg(y.lower).arg(y.upper).arg(data.upper)));
    deltatune::ExperimentStore store(dbPath());
    const auto rec = store.find_run(runId.toStdString());
    QVERIFY(rec.has_value());
    QCOMPARE(rec->status, std::string("running"));
    QVERIFY(store.metrics(runId.toStdString()).size() >= 2);
  }

  void pauseHoldsTheRun() {
    monitor()->togglePause();
    QCOMPARE(controller()->state(), RunController::State::Paused);
    // The pause takes effect at the next step boundary: a step in flight still lands (on a loaded machine it
    // can take seconds), none after it.
    const int atPause = steps_;
    guitest::waitFor([&] { return steps_ > atPause; }, 10000);
    const int before = steps_;
    QVERIFY(before <= atPause + 1);
    QTest::qWait(2000);
    QCOMPARE(steps_, before);
    monitor()->togglePause();
    QCOMPARE(controller()->state(), RunController::State::Running);
    QVERIFY(guitest::waitFor([&] { return steps_ > before; }, 60000));
  }

  void stopCheckpointsAndCancels() {
    QSignalSpy finished(controller(), &RunController::runFinished);
    monitor()->stop();
    QVERIFY(guitest::waitFor([&] { return finished.count() == 1; }, 120000));
    QCOMPARE(finished.first().at(0).toString(), QString("cancelled"));
    QVERIFY(!controller()->isActive());
    const int64_t stoppedAt = lastStep_;
    QVERIFY(stoppedAt < 16);
    deltatune::ExperimentStore store(dbPath());
    const auto rec = store.find_run(monitor()->lastRunId().toStdString());
    QCOMPARE(rec->status, std::string("cancelled"));
    bool checkpoint = false;
    for (const auto& a : store.artifacts(rec->id))
      checkpoint = checkpoint || (a.kind == "checkpoint" && a.step == stoppedAt);
    QVERIFY2(checkpoint, "stop must write a checkpoint at the step it stopped");
  }

  void resumeFinishesTheRun() {
    const int64_t stoppedAt = lastStep_;
    QSignalSpy finished(controller(), &RunController::runFinished);
    QVERIFY(monitor()->resume());
    QVERIFY(guitest::waitFor([&] { return finished.count() == 1; }, 300000));
    QVERIFY2(finished.first().at(0).toString() == "finished", qPrintable(finished.first().at(1).toString()));
    QCOMPARE(lastStep_, int64_t(16));
    deltatune::ExperimentStore store(dbPath());
    const auto metrics = store.metrics(monitor()->lastRunId().toStdString());
    QCOMPARE(metrics.size(), size_t(16));  // resume continued at stoppedAt + 1, nothing duplicated
    for (size_t i = 0; i < metrics.size(); ++i) QCOMPARE(metrics[i].step, int64_t(i + 1));
    QVERIFY(stoppedAt >= 3);
    QCOMPARE(store.find_run(monitor()->lastRunId().toStdString())->status, std::string("finished"));
  }

  void runAppearsInExperiments() {
    window_->showPage(MainWindow::ExperimentsPageIndex);
    ExperimentsPage* ex = window_->experimentsPage();
    QVERIFY(ex->model()->rowOfId(monitor()->lastRunId()) >= 0);
    ex->selectRuns({monitor()->lastRunId()});
    QCOMPARE(ex->overlayPlot()->graphCount(), 1);
    QCOMPARE(ex->overlayPlot()->graph(0)->dataCount(), 16);
  }

  void exportWritesAdapter() {
    ExportPage* page = window_->exportPage();
    page->refresh();
    page->selectRun(monitor()->lastRunId());
    const QString out = tmp_.path() + "/export";
    page->setOutputDir(out);
    QSignalSpy done(page, &ExportPage::exportFinished);
    QVERIFY2(page->startExport(), qPrintable(page->statusText()));
    QVERIFY(guitest::waitFor([&] { return done.count() == 1; }, 120000));
    QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(1).toString()));
    QCOMPARE(page->progressBar()->value(), 1000);
    QVERIFY(QFileInfo::exists(out + "/adapter_config.json"));
    QVERIFY(QFileInfo::exists(out + "/adapter_model.safetensors"));
  }

  // Start again after a finished run: that run's folder is kept byte for byte and the new run writes next to it.
  void startAgainWritesNextToTheEarlierRun() {
    deltatune::RunConfig cfg = window_->document()->config();
    const QString first = QString::fromStdString(cfg.output_dir);
    const QByteArray adapter = guitest::readAll(first + "/adapter_model.safetensors");
    QVERIFY(!adapter.isEmpty());
    cfg.max_steps = 2;
    window_->document()->setConfig(cfg);
    QSignalSpy finished(controller(), &RunController::runFinished);
    QVERIFY(monitor()->start());
    QVERIFY(guitest::waitFor([&] { return finished.count() == 1; }, 300000));
    QVERIFY2(finished.first().at(0).toString() == "finished", qPrintable(monitor()->logText()));
    QCOMPARE(QString::fromStdString(window_->document()->config().output_dir), first + "-2");
    QVERIFY(monitor()->logText().contains(first + "-2"));
    QVERIFY(QFileInfo::exists(first + "-2/adapter_model.safetensors"));
    QCOMPARE(guitest::readAll(first + "/adapter_model.safetensors"), adapter);
  }

  void screenshotsOfEveryPage() {
    const QStringList files = window_->grabPages(tmp_.path() + "/shots");
    QCOMPARE(files.size(), int(MainWindow::PageCount));
    for (const QString& f : files) QVERIFY(QFileInfo(f).size() > 1000);
  }

  void cleanupTestCase() { window_.reset(); }
};

QTEST_MAIN(MonitorRunTest)
#include "monitor_run_test.moc"
