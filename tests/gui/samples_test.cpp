// sample_prompts in the studio: two short demo runs (CPU) whose config asks for sample generations at every
// eval step. The Monitor shows the running run's answers per eval step; Experiments > Samples compares the
// selected runs (latest step of each) and every step of a run, all as the database holds them.
#include <QHeaderView>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "gui_test_util.h"
#include "main_window.h"
#include "pages/experiments_page.h"
#include "pages/monitor_page.h"
#include "run_controller.h"
#include "run_document.h"
#include "samples_view.h"

using namespace studio;

class SamplesTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::unique_ptr<AppSettings> settings_;
  std::unique_ptr<MainWindow> window_;
  QStringList runIds_;

  std::string dbPath() const { return (tmp_.path() + "/experiments.db").toStdString(); }
  static QStringList headers(const QTableWidget* t) {
    QStringList h;
    for (int c = 0; c < t->columnCount(); ++c) h << t->horizontalHeaderItem(c)->text();
    return h;
  }

  void runDemo(const std::string& name, double lr) {
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 4);
    cfg.run_name = name;
    cfg.learning_rate = lr;
    cfg.eval_steps = 2;
    cfg.save_steps = 0;
    cfg.val_set_size = 0;
    cfg.sample_max_new_tokens = 8;
    cfg.output_dir = (tmp_.path() + "/runs/" + QString::fromStdString(name)).toStdString();
    QVERIFY(cfg.sample_prompts.size() == 2);
    window_->document()->setConfig(cfg);
    QVERIFY(window_->monitorPage()->start());
    QVERIFY2(guitest::waitFor([&] { return !window_->controller()->isActive(); }, 300000),
             qPrintable(window_->monitorPage()->logText()));
    QCOMPARE(window_->monitorPage()->lastStatus(), QStringLiteral("finished"));
    runIds_ << window_->monitorPage()->lastRunId();
  }

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    settings_ = std::make_unique<AppSettings>(tmp_.path() + "/settings.ini");
    window_ = std::make_unique<MainWindow>(settings_.get());
    window_->resize(1400, 900);
    window_->show();
  }

  void monitorShowsEachEvalStepsAnswers() {
    runDemo("samples-a", 1e-2);
    const QTableWidget* t = window_->monitorPage()->samples()->table();
    QCOMPARE(headers(t), (QStringList{"Prompt", "step 2", "step 4"}));
    QCOMPARE(t->rowCount(), 2);
    QCOMPARE(t->item(0, 0)->text(), QStringLiteral("What is 3 plus 4?"));
    QCOMPARE(t->item(1, 0)->text(), QStringLiteral("Name the capital city of France."));
    deltatune::ExperimentStore store(dbPath());
    const auto samples = store.samples(runIds_.first().toStdString());
    QCOMPARE(samples.size(), size_t(4));
    QCOMPARE(t->item(0, 1)->text(), QString::fromStdString(samples[0].text));
    QCOMPARE(t->item(1, 2)->text(), QString::fromStdString(samples[3].text));
  }

  void experimentsComparesRunsAndSteps() {
    runDemo("samples-b", 3e-3);
    ExperimentsPage* ex = window_->experimentsPage();
    ex->refresh();
    ex->selectRuns(runIds_);
    SamplesView* v = ex->samples();
    QCOMPARE(headers(v->table()), (QStringList{"Prompt", "samples-a · step 4", "samples-b · step 4"}));
    deltatune::ExperimentStore store(dbPath());
    for (int r = 0; r < 2; ++r) {
      const auto sa = store.samples(runIds_[0].toStdString()), sb = store.samples(runIds_[1].toStdString());
      QCOMPARE(v->cellText(r, "samples-a · step 4"), QString::fromStdString(sa[2 + r].text));
      QCOMPARE(v->cellText(r, "samples-b · step 4"), QString::fromStdString(sb[2 + r].text));
    }
    v->setAllSteps(true);
    QCOMPARE(headers(v->table()), (QStringList{"Prompt", "samples-a · step 2", "samples-a · step 4",
                                               "samples-b · step 2", "samples-b · step 4"}));
    ex->selectRuns({runIds_[1]});
    QCOMPARE(headers(v->table()), (QStringList{"Prompt", "step 2", "step 4"}));
    if (const QByteArray dir = qgetenv("DT_SCREENSHOT_DIR"); !dir.isEmpty()) {
      window_->showPage(MainWindow::MonitorPageIndex);
      window_->monitorPage()->grab().save(QString::fromLocal8Bit(dir) + "/samples_monitor.png");
      window_->showPage(MainWindow::ExperimentsPageIndex);
      ex->selectRuns(runIds_);
      v->setAllSteps(false);
      if (auto* tabs = ex->findChild<QTabWidget*>()) tabs->setCurrentWidget(v);
      window_->grab().save(QString::fromLocal8Bit(dir) + "/samples_experiments.png");
    }
  }
};

QTEST_MAIN(SamplesTest)
#include "samples_test.moc"
