#include "yaml_blocks.h"

#include <QMap>
#include <QRegularExpression>
#include <algorithm>

namespace studio {

namespace {
const QRegularExpression& topLevelKey() {
  static const QRegularExpression re(QStringLiteral("^([A-Za-z_][A-Za-z0-9_.-]*)\\s*:(.*)$"));
  return re;
}

QString joinBlocks(const QList<YamlBlock>& blocks) {
  QString out;
  for (const YamlBlock& b : blocks) {
    const bool nested = b.text.startsWith('\n');
    out += b.key + ":" + (nested || b.text.isEmpty() ? QString() : QStringLiteral(" ")) + b.text + "\n";
  }
  return out;
}
}  // namespace

QList<YamlBlock> yamlBlocks(const QString& yaml) {
  QList<YamlBlock> blocks;
  const QStringList lines = yaml.split('\n');
  for (const QString& raw : lines) {
    QString line = raw;
    if (line.endsWith('\r')) line.chop(1);
    const QString t = line.trimmed();
    if (t.isEmpty() || t.startsWith('#') || line.startsWith("---")) continue;
    const auto m = topLevelKey().match(line);
    if (m.hasMatch()) {
      blocks.append({m.captured(1), m.captured(2).trimmed()});
    } else if (!blocks.isEmpty()) {
      // Continuation (nested list/map) keeps its indentation so the block can be written back as is.
      while (line.endsWith(' ')) line.chop(1);
      blocks.last().text += "\n" + line;
    }
  }
  return blocks;
}

QString mergeYamlBlocks(const QString& base, const QString& overlay, const QStringList& skipKeys) {
  QList<YamlBlock> blocks = yamlBlocks(base);
  for (const YamlBlock& o : yamlBlocks(overlay)) {
    if (skipKeys.contains(o.key)) continue;
    bool replaced = false;
    for (YamlBlock& b : blocks) {
      if (b.key == o.key) {
        b.text = o.text;
        replaced = true;
      }
    }
    if (!replaced) blocks.append(o);
  }
  return joinBlocks(blocks);
}

QString removeYamlBlocks(const QString& yaml, const QStringList& keys) {
  QList<YamlBlock> blocks = yamlBlocks(yaml);
  blocks.erase(
      std::remove_if(blocks.begin(), blocks.end(), [&](const YamlBlock& b) { return keys.contains(b.key); }),
      blocks.end());
  return joinBlocks(blocks);
}

QList<ConfigDiffRow> configDiff(const QList<QString>& yamls) {
  QStringList order;
  QList<QMap<QString, QString>> maps;
  for (const QString& y : yamls) {
    QMap<QString, QString> m;
    for (const YamlBlock& b : yamlBlocks(y)) {
      if (!order.contains(b.key)) order.append(b.key);
      m.insert(b.key, b.text.trimmed());
    }
    maps.append(m);
  }
  QList<ConfigDiffRow> rows;
  for (const QString& k : order) {
    ConfigDiffRow row{k, {}};
    for (const auto& m : maps) row.values.append(m.contains(k) ? m.value(k) : QStringLiteral("(unset)"));
    bool differs = false;
    for (const QString& v : row.values) differs = differs || v != row.values.first();
    if (differs) rows.append(row);
  }
  return rows;
}

}  // namespace studio
