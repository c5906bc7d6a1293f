// One run over several GPUs from the studio: the Train page's GPU picker writes `gpus`, the Monitor starts such
// a run as a `deltatune train` child (one worker process per GPU), shows its steps, and the run's GPUs and
// workers show in Experiments' details. The run trains on the CPU backend here (no GPU on this machine): the
// engine's data-parallel path then sums over host connections instead of NCCL, the same coordination.
#include <QCheckBox>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "gpu_picker.h"
#include "gui_test_util.h"
#include "main_window.h"
#include "pages/experiments_page.h"
#include "pages/monitor_page.h"
#include "pages/train_page.h"
#include "queue_runner.h"
#include "run_controller.h"
#include "run_document.h"
#include "run_queue.h"

using namespace studio;

class DataParallelTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::unique_ptr<AppSettings> settings_;
  std::unique_ptr<MainWindow> window_;
  std::string dbPath() const { return (tmp_.path() + "/experiments.db").toStdString(); }

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    settings_ = std::make_unique<AppSettings>(tmp_.path() + "/settings.ini");
    window_ = std::make_unique<MainWindow>(settings_.get());
    window_->resize(1400, 900);
    window_->show();
  }

  void pickerWritesTheGpusKey() {
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 4);
    cfg.gpus = {0, 1};
    RunDocument* doc = window_->document();
    doc->setConfig(cfg);
    GpuPicker* picker = window_->trainPage()->gpuPicker();
    QCOMPARE(picker->checkedGpus(), (QList<int>{0, 1}));
    QVERIFY(window_->trainPage()->gpusNoteText().contains("Data parallel over 2 GPUs"));
    QVERIFY(RunController::isDataParallel(doc->config()));

    picker->setChecked(1, false);  // one GPU: the plain `gpu` key
    QVERIFY(doc->config().gpus.empty());
    QCOMPARE(doc->config().gpu, 0);
    QVERIFY(!RunController::isDataParallel(doc->config()));
    picker->setChecked(0, false);  // the last GPU stays chosen
    QCOMPARE(picker->checkedGpus(), (QList<int>{0}));

    picker->setChecked(1, true);
    QCOMPARE(doc->config().gpus, (std::vector<int>{0, 1}));
    QVERIFY(doc->toYaml().contains("gpus: [0, 1]"));
    picker->setAll(true);
    QVERIFY(doc->config().gpus_all);
    QVERIFY(doc->toYaml().contains("gpus: all"));
    picker->setAll(false);
    QCOMPARE(doc->config().gpus, (std::vector<int>{0, 1}));
    const QString shots = qEnvironmentVariable("DT_GUI_SHOT_DIR");
    if (!shots.isEmpty()) {
      window_->showPage(MainWindow::TrainPageIndex);
      QTest::qWait(50);
      window_->grab().save(shots + "/train_gpus_test.png");
    }
  }

  void monitorRunsItOverTwoWorkers() {
    window_->controller()->setCliPath(QStringLiteral(DT_CLI_PATH));
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 4);
    cfg.gpus = {0, 1};
    cfg.save_steps = 2;
    cfg.eval_steps = 0;
    window_->document()->setConfig(cfg);
    window_->showPage(MainWindow::MonitorPageIndex);
    MonitorPage* monitor = window_->monitorPage();
    QSignalSpy steps(window_->controller(), &RunController::stepReported);
    QVERIFY(monitor->start());
    QVERIFY(!window_->controller()->canPause());  // a child process: stop, no pause
    QVERIFY2(guitest::waitFor([&] { return !window_->controller()->isActive(); }, 300000),
             qPrintable(monitor->logText()));
    QCOMPARE(monitor->lastStatus(), QStringLiteral("finished"));
    QCOMPARE(steps.count(), 4);
    QCOMPARE(monitor->lastStep(), 4);
    deltatune::ExperimentStore store(dbPath());
    const auto r = store.find_run(monitor->lastRunId().toStdString());
    QVERIFY(r.has_value());
    QCOMPARE(r->status, std::string("finished"));
    QVERIFY2(QString::fromStdString(r->device).startsWith("2 workers"), r->device.c_str());

    window_->showPage(MainWindow::ExperimentsPageIndex);
    window_->experimentsPage()->refresh();
    window_->experimentsPage()->selectRuns({monitor->lastRunId()});
    const QString details = window_->experimentsPage()->detailsText();
    QVERIFY2(details.contains("CPU, 2 data-parallel workers") && details.contains("2 workers: rank 0"), qPrintable(details));
  }

  void queueRunsADataParallelEntryAlone() {
    RunQueue q;
    QVERIFY(q.load(tmp_.path() + "/q/queue.json"));
    QueueRunner runner(&q);
    runner.setCliPath(QStringLiteral(DT_CLI_PATH));
    runner.setDatabasePath(QString::fromStdString(dbPath()));
    runner.setGpuPool({0, 1});
    auto entry = [&](const QString& name, std::vector<int> gpus) {
      deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 2);
      cfg.run_name = name.toStdString();
      cfg.output_dir = (tmp_.path() + "/runs/" + name).toStdString();
      cfg.gpus = std::move(gpus);
      QueueItem it;
      it.name = name;
      it.configYaml = QString::fromStdString(deltatune::run_config_to_yaml(cfg));
      return it;
    };
    q.add({entry("single-a", {}), entry("dp", {0, 1}), entry("single-b", {})});
    int most = 0;
    bool dpWithOthers = false;
    connect(&runner, &QueueRunner::runningChanged, this, [&](int n) {
      most = std::max(most, n);
      if (q.item(1)->state == QueueItem::State::Running && n > 1) dpWithOthers = true;
    });
    runner.setActive(true);
    QVERIFY(guitest::waitFor([&] { return q.count(QueueItem::State::Queued) == 0 && runner.runningCount() == 0; },
                             300000));
    for (int i = 0; i < 3; ++i) QCOMPARE(q.item(i)->state, QueueItem::State::Done);
    QVERIFY(!dpWithOthers);
    deltatune::ExperimentStore store(dbPath());
    const auto dp = store.find_run(q.item(1)->runId.toStdString());
    QVERIFY(dp.has_value());
    QVERIFY2(QString::fromStdString(dp->device).startsWith("2 workers"), dp->device.c_str());
  }
};

QTEST_MAIN(DataParallelTest)
#include "data_parallel_test.moc"
