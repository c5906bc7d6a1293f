// The Experiments page over a database with known runs: table, filter, tags, overlay aligned by step /
// tokens / time, and a config diff that lists only the keys that differ.
#include <qcustomplot.h>

#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"
#include "gui_test_util.h"
#include "pages/experiments_page.h"
#include "runs_table_model.h"

using namespace studio;

namespace {
deltatune::StepMetrics metric(int64_t step, double loss, int64_t tokensPerStep, double secondsPerStep) {
  deltatune::StepMetrics m;
  m.step = step;
  m.total_steps = 5;
  m.loss = loss;
  m.eval_loss = step == 5 ? loss + 0.1 : -1;
  m.lr = 1e-3;
  m.grad_norm = 1;
  m.tokens_seen = step * tokensPerStep;
  m.wall_seconds = static_cast<double>(step) * secondsPerStep;
  m.tokens_per_second = static_cast<double>(tokensPerStep) / secondsPerStep;
  return m;
}
}  // namespace

class ExperimentsTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::string idA_, idB_;

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    deltatune::ExperimentStore store((tmp_.path() + "/experiments.db").toStdString());
    deltatune::RunConfig cfg;
    cfg.base_model = "/models/tiny";
    cfg.datasets = {{"/data/a.jsonl", "chat", ""}};
    deltatune::RunRecord a;
    a.name = "r8";
    a.status = "finished";
    a.model = cfg.base_model;
    a.config_yaml = deltatune::run_config_to_yaml(cfg);
    a.final_loss = 2.0;
    idA_ = store.create_run(a);
    cfg.lora_r = 32;
    cfg.learning_rate = 1e-3;
    deltatune::RunRecord b = a;
    b.name = "r32";
    b.config_yaml = deltatune::run_config_to_yaml(cfg);
    b.final_loss = 1.0;
    idB_ = store.create_run(b);
    for (int64_t s = 1; s <= 5; ++s) {
      store.add_metrics(idA_, metric(s, 3.0 - 0.2 * static_cast<double>(s), 100, 1.0));
      store.add_metrics(idB_, metric(s, 3.0 - 0.4 * static_cast<double>(s), 200, 2.0));
    }
  }

  void tableListsRuns() {
    AppSettings settings(tmp_.path() + "/s.ini");
    ExperimentsPage page(&settings);
    page.refresh();
    QVERIFY2(page.errorText().isEmpty(), qPrintable(page.errorText()));
    QCOMPARE(page.model()->rowCount(), 2);
    const int rowB = page.model()->rowOfId(QString::fromStdString(idB_));
    QCOMPARE(page.model()->index(rowB, RunsTableModel::Rank).data().toString(), QString("32"));
    QCOMPARE(page.model()->index(rowB, RunsTableModel::FinalLoss).data().toString(), QString("1.0000"));
    page.setFilterText("r32");
    QCOMPARE(page.view()->model()->rowCount(), 1);
    page.setFilterText(QString());
    QCOMPARE(page.view()->model()->rowCount(), 2);
  }

  void overlayAlignsByStepTokensAndTime() {
    AppSettings settings(tmp_.path() + "/s.ini");
    ExperimentsPage page(&settings);
    page.resize(1000, 800);
    page.refresh();
    page.selectRuns({QString::fromStdString(idA_), QString::fromStdString(idB_)});
    QCOMPARE(page.selectedRunIds().size(), 2);
    QCustomPlot* plot = page.overlayPlot();
    QCOMPARE(plot->graphCount(), 2);
    auto graphOf = [&](const QString& name) -> QCPGraph* {
      for (int i = 0; i < plot->graphCount(); ++i)
        if (plot->graph(i)->name() == name) return plot->graph(i);
      return nullptr;
    };
    QCPGraph* a = graphOf("r8");
    QCPGraph* b = graphOf("r32");
    QVERIFY(a && b);
    QCOMPARE(a->dataCount(), 5);
    QCOMPARE(b->data()->at(4)->key, 5.0);
    QVERIFY(qAbs(b->data()->at(4)->value - 1.0) < 1e-9);
    page.setAxis(Axis::TokensSeen);
    QCOMPARE(graphOf("r8")->data()->at(4)->key, 500.0);
    QCOMPARE(graphOf("r32")->data()->at(4)->key, 1000.0);
    page.setAxis(Axis::WallTime);
    QCOMPARE(graphOf("r32")->data()->at(0)->key, 2.0);
    page.setMetric(Metric::EvalLoss);
    QCOMPARE(graphOf("r8")->dataCount(), 1);
  }

  void diffShowsOnlyDifferences() {
    AppSettings settings(tmp_.path() + "/s.ini");
    ExperimentsPage page(&settings);
    page.refresh();
    page.selectRuns({QString::fromStdString(idA_), QString::fromStdString(idB_)});
    QStringList keys;
    for (const auto& row : page.diffRows()) keys << row.key;
    keys.sort();
    QCOMPARE(keys, QStringList({"learning_rate", "lora_r"}));
    for (const auto& row : page.diffRows()) {
      QCOMPARE(row.values.size(), 2);
      if (row.key == "lora_r") QVERIFY(row.values.contains("32") && row.values.contains("16"));
    }
  }

  void tagAndDelete() {
    AppSettings settings(tmp_.path() + "/s.ini");
    ExperimentsPage page(&settings);
    page.refresh();
    page.selectRuns({QString::fromStdString(idA_)});
    page.tagSelected("baseline");
    const int row = page.model()->rowOfId(QString::fromStdString(idA_));
    QCOMPARE(page.model()->index(row, RunsTableModel::Tags).data().toString(), QString("baseline"));
    page.setFilterText("baseline");
    QCOMPARE(page.view()->model()->rowCount(), 1);
    page.setFilterText(QString());
    page.selectRuns({QString::fromStdString(idB_)});
    page.deleteSelected();
    QCOMPARE(page.model()->rowCount(), 1);
    deltatune::ExperimentStore store((tmp_.path() + "/experiments.db").toStdString());
    QVERIFY(!store.find_run(idB_).has_value());
  }
};

QTEST_MAIN(ExperimentsTest)
#include "experiments_test.moc"
