// The run queue: order, states and persistence (queue.json survives a restart, an interrupted run resumes),
// the grid of runs from one config, and real queued demo runs in `deltatune train` child processes, one
// after another and two side by side.
#include <QFile>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "grid_dialog.h"
#include "grid_sweep.h"
#include "gui_test_util.h"
#include "main_window.h"
#include "pages/queue_page.h"
#include "queue_runner.h"
#include "run_document.h"
#include "run_queue.h"

using namespace studio;

namespace {
QueueItem itemOf(const deltatune::RunConfig& cfg, const QString& name) {
  QueueItem it;
  it.name = name;
  it.configYaml = QString::fromStdString(deltatune::run_config_to_yaml(cfg));
  return it;
}
}  // namespace

class RunQueueTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::string dbPath() const { return (tmp_.path() + "/experiments.db").toStdString(); }
  deltatune::RunConfig demo(const QString& name, int64_t steps) {
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, steps);
    cfg.run_name = name.toStdString();
    cfg.output_dir = (tmp_.path() + "/runs/" + name).toStdString();
    cfg.eval_steps = 0;
    cfg.save_steps = 0;
    return cfg;
  }

 private slots:
  void initTestCase() { guitest::isolate(tmp_); }

  void orderStatesAndReload() {
    const QString file = tmp_.path() + "/q1/queue.json";
    RunQueue q;
    QVERIFY(q.load(file));  // missing file: empty queue
    QCOMPARE(q.rowCount(), 0);
    const QStringList ids = q.add({itemOf(demo("a", 2), "a"), itemOf(demo("b", 2), "b"), itemOf(demo("c", 2), "c")});
    QCOMPARE(ids.size(), 3);
    QVERIFY(QFile::exists(file));
    QVERIFY(q.move(ids[2], -1));  // a c b
    QVERIFY(!q.move(ids[0], -1));  // already first
    q.update(ids[0], [](QueueItem& it) {
      it.state = QueueItem::State::Running;
      it.runId = QStringLiteral("abc123");
    });
    QVERIFY(!q.remove(ids[0]));  // running entries stay
    q.update(ids[1], [](QueueItem& it) { it.state = QueueItem::State::Done; });
    QCOMPARE(q.nextQueued(), ids[2]);

    RunQueue again;  // a restart
    QVERIFY(again.load(file));
    QCOMPARE(again.rowCount(), 3);
    QCOMPARE(again.item(0)->name, QStringLiteral("a"));
    QCOMPARE(again.item(1)->name, QStringLiteral("c"));
    QCOMPARE(again.item(2)->name, QStringLiteral("b"));
    // The entry that was running when the studio went away is queued again to resume its run.
    QCOMPARE(again.item(0)->state, QueueItem::State::Queued);
    QCOMPARE(again.item(0)->resumeRun, QStringLiteral("abc123"));
    QCOMPARE(again.item(2)->state, QueueItem::State::Done);
    QCOMPARE(again.removeFinished(), 1);
    QCOMPARE(again.rowCount(), 2);
    const deltatune::RunConfig back =
        deltatune::run_config_from_yaml_string(again.item(1)->configYaml.toStdString(), "/");
    QCOMPARE(back.run_name, std::string("c"));
  }

  void corruptFileIsKept() {
    const QString file = tmp_.path() + "/q2/queue.json";
    QDir().mkpath(tmp_.path() + "/q2");
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{ not json");
    f.close();
    RunQueue q;
    QVERIFY(!q.load(file));
    QVERIFY(q.errorString().contains(file));
    q.add({itemOf(demo("x", 2), "x")});  // saving stays off: the broken file is left for the user
    QFile g(file);
    QVERIFY(g.open(QIODevice::ReadOnly));
    QCOMPARE(g.readAll(), QByteArray("{ not json"));
  }

  void gridIsTheCartesianProduct() {
    const deltatune::RunConfig base = demo("demo", 2);
    QCOMPARE(parseSweepValues(" 1e-4, 2e-4 5e-4 "), (QStringList{"1e-4", "2e-4", "5e-4"}));
    const QList<SweepAxis> axes = {{"learning_rate", {"1e-4", "2e-4", "5e-4"}}, {"lora_r", {"8", "16"}}};
    QCOMPARE(sweepSize(axes), 6);
    const QList<SweepRun> runs = expandSweep(base, axes);
    QCOMPARE(runs.size(), 6);
    QSet<QString> names, dirs;
    for (const SweepRun& r : runs) {
      names.insert(r.name);
      dirs.insert(QString::fromStdString(r.config.output_dir));
      QCOMPARE(QString::fromStdString(r.config.run_name), r.name);
      QCOMPARE(r.config.max_steps, base.max_steps);  // the rest of the config is the base's
    }
    QCOMPARE(names.size(), 6);
    QCOMPARE(dirs.size(), 6);
    QCOMPARE(runs[0].name, QStringLiteral("demo-lr1e-4-r8"));
    QCOMPARE(runs[1].name, QStringLiteral("demo-lr1e-4-r16"));
    QCOMPARE(runs[5].name, QStringLiteral("demo-lr5e-4-r16"));
    QCOMPARE(runs[3].config.learning_rate, 2e-4);
    QCOMPARE(runs[3].config.lora_r, 16);
    QCOMPARE(QFileInfo(QString::fromStdString(runs[0].config.output_dir)).absolutePath(),
             QFileInfo(QString::fromStdString(base.output_dir)).absolutePath());
    // A value the engine refuses names the key.
    try {
      expandSweep(base, {{"lora_r", {"eight"}}});
      QFAIL("a bad value was accepted");
    } catch (const std::exception& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains("lora_r"), e.what());
    }

    GridDialog dlg(base);
    dlg.setAxis(0, "learning_rate", "1e-4, 3e-4");
    dlg.setAxis(1, "lora_r", "4 8 16");
    QCOMPARE(dlg.runs().size(), 6);
    QVERIFY(dlg.errorText().isEmpty());
    dlg.setAxis(1, "lora_r", "4, x");
    QVERIFY(dlg.runs().isEmpty());
    QVERIFY(dlg.errorText().contains("lora_r"));
  }

  void runsOneAfterAnotherThenSideBySide() {
    RunQueue q;
    QVERIFY(q.load(tmp_.path() + "/q3/queue.json"));
    QueueRunner runner(&q);
    runner.setCliPath(QStringLiteral(DT_CLI_PATH));
    runner.setDatabasePath(QString::fromStdString(dbPath()));
    deltatune::RunConfig broken = demo("broken", 2);
    broken.base_model = (tmp_.path() + "/no-such-model").toStdString();
    const QStringList ids = q.add({itemOf(demo("first", 2), "first"), itemOf(broken, "broken"),
                                   itemOf(demo("skipped", 2), "skipped"), itemOf(demo("second", 2), "second")});
    runner.cancel(ids[2]);  // a queued entry: skipped
    QCOMPARE(q.item(2)->state, QueueItem::State::Cancelled);
    int most = 0;
    connect(&runner, &QueueRunner::runningChanged, this, [&](int n) { most = std::max(most, n); });
    runner.setActive(true);
    QVERIFY2(guitest::waitFor([&] { return q.count(QueueItem::State::Queued) == 0 && runner.runningCount() == 0; },
                              300000),
             qPrintable(q.item(0)->message + " / " + q.item(3)->message));
    QCOMPARE(most, 1);  // no GPUs picked: one at a time
    QCOMPARE(q.item(0)->state, QueueItem::State::Done);
    QCOMPARE(q.item(1)->state, QueueItem::State::Failed);  // a failed run does not stop the queue
    QVERIFY2(q.item(1)->message.contains("no-such-model"), qPrintable(q.item(1)->message));
    QCOMPARE(q.item(3)->state, QueueItem::State::Done);
    deltatune::ExperimentStore store(dbPath());
    for (int row : {0, 3}) {
      const auto r = store.find_run(q.item(row)->runId.toStdString());
      QVERIFY(r.has_value());
      QCOMPARE(r->status, std::string("finished"));
      QCOMPARE(r->steps, int64_t(2));
      QCOMPARE(QString::fromStdString(r->name), q.item(row)->name);
    }

    // Two "GPUs" picked (the runs train on the CPU backend, each told its own GPU): two at a time.
    most = 0;
    runner.setGpuPool({0, 1});
    const QStringList more = q.add({itemOf(demo("p1", 3), "p1"), itemOf(demo("p2", 3), "p2"),
                                    itemOf(demo("p3", 3), "p3")});
    runner.schedule();
    QVERIFY(guitest::waitFor([&] { return q.count(QueueItem::State::Queued) == 0 && runner.runningCount() == 0; },
                             300000));
    QCOMPARE(most, 2);
    QSet<int> gpus;
    for (const QString& id : more) {
      const QueueItem* it = q.item(q.rowOfId(id));
      QCOMPARE(it->state, QueueItem::State::Done);
      gpus.insert(it->gpu);
      const auto r = store.find_run(it->runId.toStdString());
      QVERIFY(r.has_value());
      QVERIFY(QString::fromStdString(r->config_yaml).contains(QStringLiteral("gpu: %1").arg(it->gpu)));
    }
    QCOMPARE(gpus, (QSet<int>{0, 1}));
  }

  void shutdownResumesNextTime() {
    const QString file = tmp_.path() + "/q4/queue.json";
    QString id, runId;
    {
      RunQueue q;
      QVERIFY(q.load(file));
      QueueRunner runner(&q);
      runner.setCliPath(QStringLiteral(DT_CLI_PATH));
      runner.setDatabasePath(QString::fromStdString(dbPath()));
      id = q.add({itemOf(demo("long", 400), "long")}).first();
      runner.setActive(true);
      QVERIFY(guitest::waitFor([&] { return q.item(0)->step >= 2; }, 300000));
      runner.stopAllForShutdown();
      QCOMPARE(q.item(0)->state, QueueItem::State::Queued);
      runId = q.item(0)->runId;
      QCOMPARE(q.item(0)->resumeRun, runId);
    }
    deltatune::ExperimentStore store(dbPath());
    const auto stopped = store.find_run(runId.toStdString());
    QVERIFY(stopped.has_value());
    QCOMPARE(stopped->status, std::string("cancelled"));
    const int64_t stoppedAt = stopped->steps;
    QVERIFY(stoppedAt >= 2 && stoppedAt < 400);

    RunQueue q;  // the next session
    QVERIFY(q.load(file));
    QCOMPARE(q.item(0)->resumeRun, runId);
    QueueRunner runner(&q);
    runner.setCliPath(QStringLiteral(DT_CLI_PATH));
    runner.setDatabasePath(QString::fromStdString(dbPath()));
    QSignalSpy started(&runner, &QueueRunner::runningChanged);
    runner.setActive(true);
    QVERIFY(guitest::waitFor([&] { return q.item(0)->step > stoppedAt; }, 300000));
    QCOMPARE(q.item(0)->runId, runId);  // the same run continued, not a new one
    runner.cancel(id);
    QVERIFY(guitest::waitFor([&] { return runner.runningCount() == 0; }, 120000));
    QCOMPARE(q.item(0)->state, QueueItem::State::Cancelled);
  }

  void queuePageAddsTheCurrentRun() {
    AppSettings settings(tmp_.path() + "/settings.ini");
    MainWindow w(&settings);
    w.resize(1300, 800);
    w.show();
    QCOMPARE(w.queueFile(), tmp_.path() + "/queue.json");
    w.document()->setConfig(demo("page", 2));
    QueuePage* page = w.queuePage();
    const int before = w.runQueue()->rowCount();
    QVERIFY(page->addCurrentRun());
    QCOMPARE(w.runQueue()->rowCount(), before + 1);
    QVERIFY(!page->addCurrentRun());  // the same output folder twice is refused
    QVERIFY(page->noteText().contains("already writes"));
    QCOMPARE(w.runQueue()->rowCount(), before + 1);
    w.showPage(MainWindow::QueuePageIndex);
    QVERIFY(page->isVisible());
    QCOMPARE(page->view()->model()->rowCount(), before + 1);

    // A grid from the dialog, queued behind it; the queue runs them one after another.
    deltatune::RunConfig base = demo("sweep", 2);
    GridDialog dlg(base, &w);
    dlg.setAxis(0, "learning_rate", "1e-3, 3e-3");
    dlg.setAxis(1, "lora_r", "4, 8");
    QCOMPARE(dlg.runs().size(), 4);
    const QString shots = qEnvironmentVariable("DT_GUI_SHOT_DIR");
    if (!shots.isEmpty()) {
      dlg.show();
      QTest::qWait(50);
      dlg.grab().save(shots + "/grid_dialog_test.png");
      dlg.hide();
    }
    QList<SweepRun> grid = dlg.runs();
    for (int i = 2; i < grid.size(); ++i) grid[i].config.max_steps = 400;  // still busy when the page is shown
    QCOMPARE(page->addRuns(grid), 4);
    QCOMPARE(w.runQueue()->rowCount(), before + 5);
    w.queueRunner()->setCliPath(QStringLiteral(DT_CLI_PATH));
    w.queueRunner()->setActive(true);
    QVERIFY(guitest::waitFor([&] { return w.runQueue()->count(QueueItem::State::Done) >= 3; }, 300000));
    QVERIFY(guitest::waitFor([&] { return w.runQueue()->item(before + 3)->step >= 2; }, 300000));
    w.queueRunner()->cancel(w.runQueue()->item(before + 4)->id);
    page->view()->selectRow(before + 3);
    QTest::qWait(50);
    if (!shots.isEmpty()) w.grab().save(shots + "/queue_page_test.png");
    w.queueRunner()->setActive(false);
    w.queueRunner()->cancel(w.runQueue()->item(before + 3)->id);
    QVERIFY(guitest::waitFor([&] { return w.queueRunner()->runningCount() == 0; }, 120000));
    QCOMPARE(w.runQueue()->item(before + 3)->state, QueueItem::State::Cancelled);
    QCOMPARE(w.runQueue()->item(before + 4)->state, QueueItem::State::Cancelled);
  }
};

QTEST_MAIN(RunQueueTest)
#include "run_queue_test.moc"
