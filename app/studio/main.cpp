// deltatune-studio: the Qt desktop studio.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QTimer>
#include <cstdio>

#include "app_settings.h"
#include "live_plots.h"
#include "main_window.h"
#include "pages/data_page.h"
#include "pages/experiments_page.h"
#include "pages/monitor_page.h"
#include "run_controller.h"
#include "run_document.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("DeltaTune"));
  QApplication::setApplicationName(QStringLiteral("deltatune-studio"));
  QApplication::setApplicationDisplayName(QStringLiteral("DeltaTune Studio"));
  QApplication::setApplicationVersion(QStringLiteral(DT_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("deltatune-studio"));

  QCommandLineParser cli;
  cli.setApplicationDescription(QStringLiteral("DeltaTune Studio: LoRA fine-tuning of Qwen3.5"));
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument(QStringLiteral("run.yaml"), QStringLiteral("Run file to open"),
                            QStringLiteral("[run.yaml]"));
  QCommandLineOption demo(QStringLiteral("demo"), QStringLiteral("Open the bundled demo run."));
  QCommandLineOption start(QStringLiteral("start"), QStringLiteral("Start the run right away."));
  QCommandLineOption backend(QStringLiteral("backend"), QStringLiteral("Override the run's backend."),
                             QStringLiteral("auto|cpu|cuda"));
  QCommandLineOption db(QStringLiteral("db"), QStringLiteral("Experiment database for this session."),
                        QStringLiteral("path"));
  QCommandLineOption shots(
      QStringLiteral("screenshot-dir"),
      QStringLiteral("With --start: save a PNG of every page after --screenshot-step steps, "
                     "stop the run and quit."),
      QStringLiteral("dir"));
  QCommandLineOption shotStep(QStringLiteral("screenshot-step"),
                              QStringLiteral("Step for --screenshot-dir (default 20)."), QStringLiteral("n"),
                              QStringLiteral("20"));
  cli.addOptions({demo, start, backend, db, shots, shotStep});
  cli.process(app);

  if (cli.isSet(db)) qputenv("DELTATUNE_DB", QDir(cli.value(db)).absolutePath().toLocal8Bit());

  studio::AppSettings settings;
  studio::MainWindow window(&settings);
  window.show();

  bool opened = true;
  if (cli.isSet(demo))
    opened = window.openDemo();
  else if (!cli.positionalArguments().isEmpty())
    opened = window.openRunFile(cli.positionalArguments().first());
  else if (!settings.recentRunFiles().isEmpty() && QFileInfo::exists(settings.recentRunFiles().first()))
    opened = window.openRunFile(settings.recentRunFiles().first());
  else
    opened = window.openDemo();  // first launch: a real (tiny) run is one click on Monitor > Start away
  if (opened && cli.isSet(backend)) {
    deltatune::RunConfig cfg = window.document()->config();
    cfg.backend = cli.value(backend).toStdString();
    window.document()->setConfig(cfg);
  }

  if (cli.isSet(shots)) {
    const QString dir = cli.value(shots);
    const int step = cli.value(shotStep).toInt();
    auto taken = std::make_shared<bool>(false);
    QObject::connect(window.controller(), &studio::RunController::stepReported, &window,
                     [&window, dir, step, taken](const deltatune::StepMetrics& m) {
                       if (*taken || m.step < step) return;
                       *taken = true;
                       window.monitorPage()->plots()->flush();
                       for (const QString& f : window.grabPages(dir))
                         std::printf("screenshot: %s\n", qPrintable(f));
                       std::fflush(stdout);
                       window.controller()->requestStop();
                     });
    QObject::connect(window.controller(), &studio::RunController::runFinished, &app,
                     [&window, dir, taken](const QString& status, const QString& message) {
                       std::printf("run %s %s\n", qPrintable(status), qPrintable(message));
                       if (!*taken) {  // the run ended before the screenshot step: take them now
                         for (const QString& f : window.grabPages(dir))
                           std::printf("screenshot: %s\n", qPrintable(f));
                       }
                       std::fflush(stdout);
                       QTimer::singleShot(200, qApp, &QApplication::quit);
                     });
  }
  if (opened && cli.isSet(start)) {
    window.showPage(studio::MainWindow::MonitorPageIndex);
    QTimer::singleShot(0, &window, [&window] { window.monitorPage()->start(); });
  }
  return QApplication::exec();
}
