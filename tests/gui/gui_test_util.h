// Shared helpers for the studio's Qt tests: isolated settings and database, the demo run in a temp
// folder, and waiting on the event loop with a deadline.
#pragma once
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <functional>

#include "deltatune/run_config.h"

namespace guitest {

inline QString demoDir() {
  return QStringLiteral(DT_SOURCE_DIR "/resources/demo");
}

// Settings, XDG paths and the experiment database go to a private temp folder.
inline void isolate(const QTemporaryDir& tmp) {
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName(QStringLiteral("DeltaTuneTest"));
  QCoreApplication::setApplicationName(QStringLiteral("deltatune-studio-test"));
  qputenv("DELTATUNE_DB", (tmp.path() + "/experiments.db").toLocal8Bit());
  qputenv("XDG_CACHE_HOME", (tmp.path() + "/cache").toLocal8Bit());
  qputenv("XDG_DATA_HOME", (tmp.path() + "/data").toLocal8Bit());
}

// The bundled demo run, short, on the CPU backend, writing into `tmp`.
inline deltatune::RunConfig demoConfig(const QTemporaryDir& tmp, int64_t maxSteps) {
  deltatune::RunConfig cfg =
      deltatune::run_config_from_yaml_file((demoDir() + "/demo_run.yaml").toStdString());
  cfg.backend = "cpu";
  cfg.max_steps = maxSteps;
  cfg.output_dir = (tmp.path() + "/runs/demo").toStdString();
  cfg.dataset_prepared_path = (tmp.path() + "/prepared").toStdString();
  return cfg;
}

// The whole file, or empty when it cannot be read.
inline QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Runs the event loop until `pred` holds or `ms` pass; returns pred().
inline bool waitFor(const std::function<bool()>& pred, int ms) {
  return QTest::qWaitFor(pred, ms);
}

}  // namespace guitest
