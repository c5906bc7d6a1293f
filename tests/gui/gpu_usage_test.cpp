// Per-GPU memory and utilization on the Monitor page (polled from nvidia-smi while a run is active) and the
// GPUs of a run in Experiments' details. This machine has no GPU: a stand-in nvidia-smi script on PATH answers
// the studio's query as the real one does.
#include <QFile>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "gpu_usage.h"
#include "gpu_usage_view.h"
#include "gui_test_util.h"
#include "main_window.h"
#include "pages/experiments_page.h"
#include "pages/monitor_page.h"
#include "run_controller.h"
#include "run_details.h"
#include "run_document.h"

using namespace studio;

class GpuUsageTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    const QString bin = tmp_.path() + "/bin";
    QDir().mkpath(bin);
    QFile f(bin + "/nvidia-smi");
    QVERIFY(f.open(QIODevice::WriteOnly));
    // Output format of nvidia-smi 550 for these queries (csv,noheader,nounits: MiB and percent).
    f.write("#!/bin/sh\n"
            "case \"$1\" in\n"
            "  *utilization*) printf '0, NVIDIA H100 80GB HBM3, 87, 61234, 81559\\n1, NVIDIA H100 80GB HBM3, 3, "
            "517, 81559\\n' ;;\n"
            "  *) exit 2 ;;\n"
            "esac\n");
    f.close();
    QFile::setPermissions(bin + "/nvidia-smi", QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    qputenv("PATH", (bin + ":" + qEnvironmentVariable("PATH")).toLocal8Bit());
  }

  void parsesTheQuery() {
    const QList<GpuUsage> u =
        parseGpuUsage("0, NVIDIA A100-SXM4-40GB, 45, 1024, 40960\n1, NVIDIA A100-SXM4-40GB, [N/A], [N/A], 40960\n");
    QCOMPARE(u.size(), 1);  // a GPU that reports N/A is left out, not shown as zero
    QCOMPARE(u[0].index, 0);
    QCOMPARE(u[0].utilization, 45);
    QCOMPARE(u[0].usedBytes, int64_t(1024) << 20);
    QCOMPARE(u[0].totalBytes, int64_t(40960) << 20);
  }

  void gpusOfARun() {
    QCOMPARE(runGpusText("backend: cuda\ngpu: 0\ngpus: [0, 1, 3]\n"), QStringLiteral("0, 1, 3 (data parallel)"));
    QCOMPARE(runGpusText("backend: auto\ngpus: all\n"), QStringLiteral("all visible GPUs (data parallel)"));
    QCOMPARE(runGpusText("backend: cuda\ngpu: 2\ngpus: []\n"), QStringLiteral("GPU 2"));
    QCOMPARE(runGpusText("backend: cuda\ngpu: 0\ngpus: [1]\n"), QStringLiteral("GPU 1"));
    QCOMPARE(runGpusText("backend: cpu\ngpu: 0\n"), QStringLiteral("CPU"));
    QCOMPARE(runGpusText("backend: cpu\ngpus: [0, 1]\n"), QStringLiteral("CPU, 2 data-parallel workers"));
  }

  void monitorPollsWhileARunIsActive() {
    AppSettings settings(tmp_.path() + "/settings.ini");
    MainWindow w(&settings);
    w.resize(1400, 900);
    w.show();
    MonitorPage* monitor = w.monitorPage();
    QVERIFY(!monitor->gpuPoller()->isActive());
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 400);
    w.document()->setConfig(cfg);
    w.showPage(MainWindow::MonitorPageIndex);
    QVERIFY(monitor->start());
    QVERIFY(monitor->gpuPoller()->isActive());
    QVERIFY(guitest::waitFor([&] { return monitor->gpuView()->rowCount() == 2; }, 10000));
    QCOMPARE(monitor->gpuView()->cellText(0, 0), QStringLiteral("0: NVIDIA H100 80GB HBM3"));
    QCOMPARE(monitor->gpuView()->cellText(0, 1), QStringLiteral("87 %"));
    QCOMPARE(monitor->gpuView()->cellText(0, 2), QStringLiteral("59.8 GiB / 79.6 GiB"));
    QCOMPARE(monitor->gpuView()->cellText(1, 1), QStringLiteral("3 %"));
    const QString shots = qEnvironmentVariable("DT_GUI_SHOT_DIR");
    if (!shots.isEmpty()) monitor->gpuView()->grab().save(shots + "/gpu_usage_view_test_fixture.png");
    monitor->stop();
    QVERIFY(guitest::waitFor([&] { return !w.controller()->isActive(); }, 120000));
    QVERIFY(!monitor->gpuPoller()->isActive());

    // The run's GPUs in Experiments' details (a CPU run here: it says so).
    w.showPage(MainWindow::ExperimentsPageIndex);
    w.experimentsPage()->refresh();
    w.experimentsPage()->selectRuns({monitor->lastRunId()});
    const QString details = w.experimentsPage()->detailsText();
    QVERIFY2(details.contains("GPUs") && details.contains("CPU") && details.contains(monitor->lastRunId()),
             qPrintable(details));
    if (!shots.isEmpty()) {
      w.experimentsPage()->findChild<QTabWidget*>()->setCurrentIndex(2);
      QTest::qWait(50);
      w.grab().save(shots + "/experiments_details_test.png");
    }
  }
};

QTEST_MAIN(GpuUsageTest)
#include "gpu_usage_test.moc"
