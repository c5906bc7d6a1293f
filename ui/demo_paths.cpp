#include "demo_paths.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>

#include "deltatune/program_path.h"
#include "deltatune/trainer.h"

namespace studio {

QString demoDir() {
  const QStringList candidates = {
      qEnvironmentVariable("DELTATUNE_DEMO_DIR"),
      QString::fromStdString(deltatune::program_path().parent_path().string()) +
          QStringLiteral("/../share/deltatune/demo"),
      QStringLiteral(DT_DEMO_INSTALL_DIR),
      QStringLiteral(DT_SOURCE_DIR "/resources/demo"),
  };
  for (const QString& c : candidates) {
    if (!c.isEmpty() && QFileInfo::exists(c + QStringLiteral("/demo_run.yaml")))
      return QDir(c).canonicalPath();
  }
  return {};
}

QString demoRunFile() {
  const QString d = demoDir();
  return d.isEmpty() ? QString() : d + QStringLiteral("/demo_run.yaml");
}

QString demoOutputDir() {
  // A new folder for each demo run that is started (runs/demo-2 after runs/demo): a run refuses a folder that
  // holds another run's output.
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) +
                      QStringLiteral("/deltatune/runs/demo");
  return QString::fromStdString(deltatune::output_dir_unused(dir.toStdString()));
}

}  // namespace studio
