// Top-level key blocks of a run YAML file. The canonical YAML (run_config_to_yaml) writes one
// top-level key per block, so comparing and merging blocks is enough for config diffs and presets
// without a YAML parser in the UI.
#pragma once
#include <QList>
#include <QString>
#include <QStringList>
#include <utility>

namespace studio {

struct YamlBlock {
  QString key;
  QString text;  // the value as written: the rest of the key's line plus its indented continuation
};

// Splits at lines that start a top-level `key:`; comments and blank lines between blocks are dropped.
QList<YamlBlock> yamlBlocks(const QString& yaml);

// `base` with every block of `overlay` replacing (or appending) the block of the same key, except
// keys in `skipKeys`.
QString mergeYamlBlocks(const QString& base, const QString& overlay, const QStringList& skipKeys = {});

// `yaml` without the blocks whose key is in `keys`.
QString removeYamlBlocks(const QString& yaml, const QStringList& keys);

struct ConfigDiffRow {
  QString key;
  QStringList values;  // one per config; "(unset)" where a config lacks the key
};

// Keys whose values differ between the configs, in the order of first appearance.
QList<ConfigDiffRow> configDiff(const QList<QString>& yamls);

}  // namespace studio
