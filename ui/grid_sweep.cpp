#include "grid_sweep.h"

#include <QDir>
#include <QFileInfo>
#include <QMap>
#include <QRegularExpression>
#include <stdexcept>

#include "yaml_blocks.h"

namespace studio {

namespace {
// Short labels keep generated run names readable.
QString shortKey(const QString& key) {
  static const QMap<QString, QString> k = {{"learning_rate", "lr"},
                                           {"lora_r", "r"},
                                           {"lora_alpha", "alpha"},
                                           {"lora_dropout", "drop"},
                                           {"micro_batch_size", "mb"},
                                           {"gradient_accumulation_steps", "ga"},
                                           {"warmup_steps", "warm"},
                                           {"weight_decay", "wd"},
                                           {"sequence_len", "seq"},
                                           {"num_epochs", "ep"},
                                           {"max_steps", "steps"},
                                           {"lr_scheduler", "sched"},
                                           {"max_grad_norm", "clip"}};
  return k.value(key, key);
}
}  // namespace

const QStringList& sweepableKeys() {
  static const QStringList k = {"learning_rate", "lora_r",          "lora_alpha",   "lora_dropout",
                                "micro_batch_size", "gradient_accumulation_steps", "warmup_steps",
                                "weight_decay",  "max_grad_norm",   "sequence_len", "num_epochs",
                                "max_steps",     "lr_scheduler",    "seed"};
  return k;
}

QStringList parseSweepValues(const QString& text) {
  static const QRegularExpression sep(QStringLiteral("[,;\\s]+"));
  return text.split(sep, Qt::SkipEmptyParts);
}

int sweepSize(const QList<SweepAxis>& axes) {
  if (axes.isEmpty()) return 0;
  int n = 1;
  for (const SweepAxis& a : axes) n *= static_cast<int>(a.values.size());
  return n;
}

QList<SweepRun> expandSweep(const deltatune::RunConfig& base, const QList<SweepAxis>& axes) {
  const int total = sweepSize(axes);
  for (const SweepAxis& a : axes) {
    if (!sweepableKeys().contains(a.key))
      throw std::runtime_error("grid: '" + a.key.toStdString() + "' is not a key that can be swept");
    if (a.values.isEmpty()) throw std::runtime_error("grid: no values for " + a.key.toStdString());
  }
  for (int i = 0; i < axes.size(); ++i)
    for (int j = 0; j < i; ++j)
      if (axes[i].key == axes[j].key)
        throw std::runtime_error("grid: " + axes[i].key.toStdString() + " is listed twice");
  const QString baseYaml = QString::fromStdString(deltatune::run_config_to_yaml(base));
  const QString baseName = QString::fromStdString(
      !base.run_name.empty() ? base.run_name
                             : QFileInfo(QString::fromStdString(base.output_dir)).fileName().toStdString());
  const QString parentDir = QFileInfo(QString::fromStdString(base.output_dir)).absolutePath();
  QList<SweepRun> runs;
  for (int n = 0; n < total; ++n) {
    QString overlay, suffix;
    int rest = n;
    for (int a = static_cast<int>(axes.size()) - 1; a >= 0; --a) {  // last axis varies fastest
      const QStringList& vs = axes[a].values;
      const QString v = vs[rest % vs.size()];
      rest /= static_cast<int>(vs.size());
      overlay.prepend(axes[a].key + ": " + v + "\n");
      suffix.prepend("-" + shortKey(axes[a].key) + v);
    }
    SweepRun run;
    try {
      run.config = deltatune::run_config_from_yaml_string(mergeYamlBlocks(baseYaml, overlay).toStdString(), "/");
    } catch (const std::exception& e) {
      throw std::runtime_error("grid run " + (baseName + suffix).toStdString() + ": " + e.what());
    }
    run.name = (baseName.isEmpty() ? QStringLiteral("run") : baseName) + suffix;
    run.name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.+-]")), QStringLiteral("_"));
    run.config.run_name = run.name.toStdString();
    run.config.output_dir = QDir(parentDir).filePath(run.name).toStdString();
    runs.append(run);
  }
  return runs;
}

}  // namespace studio
