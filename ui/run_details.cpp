#include "run_details.h"

#include <QObject>
#include <QStringList>

#include "format.h"
#include "yaml_blocks.h"

namespace studio {

namespace {
QString value(const QList<YamlBlock>& blocks, const QString& key) {
  for (const YamlBlock& b : blocks)
    if (b.key == key) return b.text.trimmed();
  return {};
}

QString row(const QString& name, const QString& v) {
  return QStringLiteral("<tr><td style='color:#555; padding-right:12px'>%1</td><td>%2</td></tr>")
      .arg(name.toHtmlEscaped(), v);
}
}  // namespace

QString runGpusText(const QString& configYaml) {
  const QList<YamlBlock> b = yamlBlocks(configYaml);
  const QString backend = value(b, QStringLiteral("backend"));
  QString gpus = value(b, QStringLiteral("gpus"));
  gpus.remove('[').remove(']');
  QStringList ids;
  for (const QString& s : gpus.split(',', Qt::SkipEmptyParts)) ids << s.trimmed();
  if (backend == QLatin1String("cpu"))  // worker processes without GPUs when several were asked for
    return ids.size() > 1 ? QObject::tr("CPU, %1 data-parallel workers").arg(ids.size()) : QObject::tr("CPU");
  if (gpus == QLatin1String("all")) return QObject::tr("all visible GPUs (data parallel)");
  if (ids.size() > 1) return QObject::tr("%1 (data parallel)").arg(ids.join(QStringLiteral(", ")));
  if (ids.size() == 1) return QObject::tr("GPU %1").arg(ids.first());
  const QString gpu = value(b, QStringLiteral("gpu"));
  return QObject::tr("GPU %1").arg(gpu.isEmpty() ? QStringLiteral("0") : gpu);
}

QString runDetailsHtml(const deltatune::RunRecord& r, const std::vector<deltatune::ArtifactRecord>& artifacts,
                       const std::vector<deltatune::EventRecord>& events) {
  auto s = [](const std::string& v) { return QString::fromStdString(v).toHtmlEscaped(); };
  QString html = QStringLiteral("<h3>%1</h3><table>").arg(s(r.name.empty() ? r.id : r.name));
  html += row(QObject::tr("Run id"), s(r.id));
  html += row(QObject::tr("Status"), s(r.status));
  html += row(QObject::tr("GPUs"), runGpusText(QString::fromStdString(r.config_yaml)).toHtmlEscaped());
  html += row(QObject::tr("Device"), s(r.device.empty() ? "—" : r.device));
  html += row(QObject::tr("Steps"), QStringLiteral("%1 / %2").arg(r.steps).arg(r.total_steps));
  html += row(QObject::tr("Final loss"), formatLoss(r.final_loss));
  html += row(QObject::tr("Best eval loss"), formatLoss(r.best_eval_loss));
  html += row(QObject::tr("Model"), s(r.model));
  html += row(QObject::tr("Data"), s(r.datasets));
  html += row(QObject::tr("Output folder"), s(r.output_dir));
  html += row(QObject::tr("Started"), s(r.created_at));
  html += row(QObject::tr("Ended"), s(r.finished_at.empty() ? "—" : r.finished_at));
  html += row(QObject::tr("Engine"), s(r.engine_version));
  if (!r.notes.empty()) html += row(QObject::tr("Notes"), s(r.notes));
  html += QStringLiteral("</table>");
  if (!artifacts.empty()) {
    html += QObject::tr("<h4>Artifacts</h4><table>");
    for (const auto& a : artifacts)
      html += row(QStringLiteral("%1 @ %2").arg(QString::fromStdString(a.kind)).arg(a.step), s(a.path));
    html += QStringLiteral("</table>");
  }
  if (!events.empty()) {
    html += QObject::tr("<h4>Latest events</h4><table>");
    const size_t from = events.size() > 12 ? events.size() - 12 : 0;
    for (size_t i = from; i < events.size(); ++i) {
      const auto& e = events[i];
      const QString color = e.level == "error" ? "#b00020" : e.level == "warning" ? "#a05a00" : "#222";
      html += row(QString::fromStdString(e.time),
                  QStringLiteral("<span style='color:%1'>%2</span>").arg(color, s(e.message)));
    }
    html += QStringLiteral("</table>");
  }
  return html;
}

}  // namespace studio
