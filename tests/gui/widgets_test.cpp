// Studio building blocks that need no engine run: settings wrapper, formatting, GPU list parsing, the
// runs table model, metric series, token HTML, the layer strip and the plots' coalescing timer.
#include <qcustomplot.h>

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "format.h"
#include "gpu_probe.h"
#include "layer_strip.h"
#include "live_plots.h"
#include "metric_series.h"
#include "runs_table_model.h"
#include "token_view.h"

using namespace studio;

namespace {
deltatune::StepMetrics step(int64_t s, double loss, double eval = -1) {
  deltatune::StepMetrics m;
  m.step = s;
  m.total_steps = 10;
  m.loss = loss;
  m.eval_loss = eval;
  m.lr = 1e-3 / static_cast<double>(s);
  m.grad_norm = 0.5;
  m.tokens_per_second = 1000;
  m.tokens_seen = s * 256;
  m.wall_seconds = 0.5 * static_cast<double>(s);
  m.vram_allocated = int64_t(1) << 30;
  m.vram_reserved = int64_t(2) << 30;
  return m;
}
}  // namespace

class WidgetsTest : public QObject {
  Q_OBJECT
 private slots:
  void settingsRecentModels() {
    QTemporaryDir tmp;
    AppSettings s(tmp.path() + "/s.ini");
    for (int i = 0; i < AppSettings::kMaxRecent + 3; ++i) s.addRecentModel(QString("/m/%1").arg(i));
    s.addRecentModel("/m/5/");  // same folder, different spelling: moves to the front
    const QStringList r = s.recentModels();
    QCOMPARE(r.size(), AppSettings::kMaxRecent);
    QCOMPARE(r.first(), QString("/m/5"));
    QCOMPARE(r.count("/m/5"), 1);
    s.removeRecentModel("/m/5");
    QVERIFY(!s.recentModels().contains("/m/5"));
    s.setDatabasePath("/tmp/x.db");
    s.sync();
    AppSettings again(tmp.path() + "/s.ini");
    QCOMPARE(again.databasePath(), QString("/tmp/x.db"));
  }

  void formatting() {
    QCOMPARE(formatBytes(512), QString("512 B"));
    QCOMPARE(formatBytes(int64_t(3) << 30), QString("3.00 GiB"));
    QCOMPARE(formatCount(1234567), QString("1.23 M"));
    QCOMPARE(formatCount(950), QString("950"));
    QCOMPARE(formatDuration(125), QString("2 min 05 s"));
    QCOMPARE(formatDuration(3720), QString("1 h 02 min"));
    QCOMPARE(formatLoss(-1), QString("—"));
  }

  void gpuRuntimeText() {
    deltatune::GpuEnvironment none;
    none.cuda_built = true;
    none.problem = "no NVIDIA driver found (libcuda.so.1 is not installed): install the NVIDIA driver 580 or newer";
    QCOMPARE(describeGpuRuntime(none), QString("no NVIDIA driver. The GPU backend cannot run: ") +
                                           QString::fromStdString(none.problem));
    // The red warning is for the cuda backend only; cpu says what the CPU run uses, auto that it falls back.
    const RuntimeLine cuda = describeRuntimeForBackend(&none, "cuda", 8);
    QCOMPARE(cuda.text, describeGpuRuntime(none));
    QVERIFY(cuda.warning);
    const RuntimeLine cpu = describeRuntimeForBackend(&none, "cpu", 8);
    QVERIFY(!cpu.warning);
    QVERIFY(cpu.text.startsWith("CPU backend: the run uses 8 CPU threads"));
    QVERIFY(!cpu.text.contains("driver."));
    QCOMPARE(describeRuntimeForBackend(nullptr, "cpu", 8).text, cpu.text);  // no need to wait for the probe
    const RuntimeLine autoNone = describeRuntimeForBackend(&none, "auto", 8);
    QVERIFY(!autoNone.warning);
    QVERIFY(autoNone.text.startsWith("Backend auto: no usable GPU here, so the run trains on the CPU (8 threads)."));
    QVERIFY(autoNone.text.contains(QString::fromStdString(none.problem)));
    QVERIFY(!describeRuntimeForBackend(nullptr, "cuda", 8).warning);  // not probed yet: no verdict
    deltatune::GpuEnvironment env;
    env.cuda_built = env.runtime_loaded = true;
    env.driver_version = 13000;
    env.driver_release = "580.95.05";
    env.runtime_version = 13000;
    deltatune::GpuDevice d;
    d.index = 1;
    d.name = "NVIDIA H100 80GB HBM3";
    d.total_bytes = int64_t(81559) * 1024 * 1024;
    d.arch = "sm_90";
    d.kernel_path = "hopper";
    env.devices = {d};
    QCOMPARE(describeGpuRuntime(env), QString("NVIDIA driver 580.95.05 (CUDA 13.0), CUDA runtime 13.0"));
    for (const char* backend : {"auto", "cuda"}) {
      QCOMPARE(describeRuntimeForBackend(&env, backend, 8).text, describeGpuRuntime(env));
      QVERIFY(!describeRuntimeForBackend(&env, backend, 8).warning);
    }
    const auto gpus = gpuList(env);
    QCOMPARE(gpus.size(), 1);
    QCOMPARE(gpus[0].index, 1);
    QCOMPARE(gpus[0].totalBytes, int64_t(81559) * 1024 * 1024);
    QCOMPARE(gpus[0].kernelPath, QString("hopper"));
  }

  void runsTableModel() {
    RunsTableModel model;
    deltatune::RunRecord a;
    a.id = "a1";
    a.name = "first";
    a.status = "finished";
    a.model = "/models/tiny";
    a.config_yaml = "lora_r: 8\nlearning_rate: 0.002\n";
    a.final_loss = 1.5;
    a.steps = 60;
    a.total_steps = 60;
    a.created_at = "2026-11-20T10:00:00Z";
    a.finished_at = "2026-11-20T10:02:05Z";
    a.tags = {"baseline", "cpu"};
    deltatune::RunRecord b = a;
    b.id = "b2";
    b.name = "";
    b.status = "failed";
    b.config_yaml = "lora_r: 16\n";
    b.final_loss = -1;
    model.setRuns({a, b});
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), int(RunsTableModel::ColumnCount));
    auto cell = [&](int row, RunsTableModel::Column c, int role = Qt::DisplayRole) {
      return model.index(row, c).data(role);
    };
    QCOMPARE(cell(0, RunsTableModel::Name).toString(), QString("first"));
    QCOMPARE(cell(1, RunsTableModel::Name).toString(), QString("b2"));  // no name: the id
    QCOMPARE(cell(0, RunsTableModel::Model).toString(), QString("tiny"));
    QCOMPARE(cell(0, RunsTableModel::Rank).toString(), QString("8"));
    QCOMPARE(cell(1, RunsTableModel::Rank, RunsTableModel::SortRole).toInt(), 16);
    QCOMPARE(cell(0, RunsTableModel::LearningRate, RunsTableModel::SortRole).toDouble(), 0.002);
    QCOMPARE(cell(0, RunsTableModel::Steps).toString(), QString("60 / 60"));
    QCOMPARE(cell(0, RunsTableModel::FinalLoss).toString(), QString("1.5000"));
    QCOMPARE(cell(1, RunsTableModel::FinalLoss).toString(), QString("—"));
    QCOMPARE(cell(0, RunsTableModel::Duration, RunsTableModel::SortRole).toDouble(), 125.0);
    QCOMPARE(cell(0, RunsTableModel::Tags).toString(), QString("baseline, cpu"));
    QCOMPARE(cell(1, RunsTableModel::Id, RunsTableModel::RunIdRole).toString(), QString("b2"));
    QCOMPARE(model.rowOfId("b2"), 1);
    QCOMPARE(model.headerData(RunsTableModel::BestEvalLoss, Qt::Horizontal).toString(), QString("Best eval"));
  }

  void metricSeries() {
    const std::vector<deltatune::StepMetrics> steps = {step(1, 3.0), step(2, 2.5, 2.8), step(3, 2.0)};
    const Series loss = seriesOf(steps, Axis::Step, Metric::Loss);
    QCOMPARE(loss.x, QVector<double>({1, 2, 3}));
    QCOMPARE(loss.y, QVector<double>({3.0, 2.5, 2.0}));
    const Series eval = seriesOf(steps, Axis::TokensSeen, Metric::EvalLoss);
    QCOMPARE(eval.x, QVector<double>({512}));
    QCOMPARE(eval.y, QVector<double>({2.8}));
    const Series vram = seriesOf(steps, Axis::WallTime, Metric::VramReserved);
    QCOMPARE(vram.x, QVector<double>({0.5, 1.0, 1.5}));
    QCOMPARE(vram.y.first(), 2.0);
    auto nan = step(4, std::nan(""));
    QVERIFY(!metricValue(nan, Metric::Loss).has_value());
  }

  void tokenHtmlMarksTrainedTokensAndBoundaries() {
    deltatune::PreviewExample ex;
    ex.tokens = {
        {1, "<|im_start|>", false}, {5, "user\n", false}, {9, " Paris", true}, {2, "<|im_end|>", true}};
    ex.truncated = true;
    const QString html = tokensToHtml(ex);
    QCOMPARE(html.count("<span title='id"), 4);
    QCOMPARE(html.count("(trained)"), 2);
    QVERIFY(html.contains("&lt;|im_start|&gt;"));
    QVERIFY(html.contains("&middot;Paris"));
    QVERIFY(html.contains("&crarr;"));
    QVERIFY(html.contains("[truncated]"));
  }

  void layerStripPaints() {
    LayerStrip strip;
    strip.resize(400, 46);
    strip.setLayerTypes({"linear_attention", "linear_attention", "linear_attention", "full_attention"});
    const QImage img = strip.grab().toImage();
    // First cell is the linear colour, last cell the full-attention colour.
    QCOMPARE(img.pixelColor(20, 12).rgb(), LayerStrip::linearColor().rgb());
    QCOMPARE(img.pixelColor(380, 12).rgb(), LayerStrip::fullColor().rgb());
    QVERIFY(strip.toolTip().contains("3 linear"));
  }

  void livePlotsCoalesceRepaints() {
    LivePlots plots;
    plots.resize(800, 600);
    for (int i = 1; i <= 50; ++i) plots.addStep(step(i, 3.0 - 0.01 * i, i % 10 == 0 ? 2.9 : -1));
    QCOMPARE(plots.pointCount(Metric::Loss), 0);  // nothing drawn until the timer fires
    QTRY_COMPARE_WITH_TIMEOUT(plots.pointCount(Metric::Loss), 50, 2000);
    QCOMPARE(plots.replotCount(), 1);  // 50 steps, one repaint
    QCOMPARE(plots.pointCount(Metric::EvalLoss), 5);
    QCOMPARE(plots.pointCount(Metric::VramReserved), 50);
    QCustomPlot* loss = plots.plots().first();
    QVERIFY(loss->xAxis->range().contains(50));
    plots.clear();
    QCOMPARE(plots.pointCount(Metric::Loss), 0);
  }

  void moeRouterLoadPlotOnlyForMoeRuns() {
    LivePlots plots;
    plots.resize(800, 700);
    plots.show();
    QCustomPlot* moe = plots.plots().last();
    plots.setSteps({step(1, 3.0), step(2, 2.9)});  // a dense run reports -1
    QCOMPARE(plots.pointCount(Metric::MoeLoadMaxRatio), 0);
    QVERIFY(!moe->isVisible());
    auto a = step(3, 2.8), b = step(4, 2.7);
    a.moe_load_max_ratio = 3.5, a.moe_load_cv = 0.9;
    b.moe_load_max_ratio = 2.5, b.moe_load_cv = 0.6;
    QCOMPARE(*metricValue(a, Metric::MoeLoadMaxRatio), 3.5);
    QVERIFY(!metricValue(step(5, 1.0), Metric::MoeLoadCv).has_value());
    plots.setSteps({a, b});
    QCOMPARE(plots.pointCount(Metric::MoeLoadMaxRatio), 2);
    QCOMPARE(plots.pointCount(Metric::MoeLoadCv), 2);
    QVERIFY(moe->isVisible());
    plots.clear();
    QVERIFY(!moe->isVisible());
  }
};

QTEST_MAIN(WidgetsTest)
#include "widgets_test.moc"
