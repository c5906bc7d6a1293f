// A grid of runs from one config: lists of values for a few keys (e.g. learning rate × LoRA rank) give
// the cartesian product of configs, each with its own run name and output folder.
#pragma once
#include <QList>
#include <QString>
#include <QStringList>

#include "deltatune/run_config.h"

namespace studio {

struct SweepAxis {
  QString key;         // a top-level run key, e.g. learning_rate
  QStringList values;  // YAML scalars, e.g. 1e-4, 2e-4
};

struct SweepRun {
  QString name;  // run_name
  deltatune::RunConfig config;
};

// Keys offered for sweeps (numbers and the schedule).
const QStringList& sweepableKeys();
// "1e-4, 2e-4 3e-4" -> ["1e-4", "2e-4", "3e-4"] (commas and/or spaces).
QStringList parseSweepValues(const QString& text);
// Number of runs the axes make (product of the value counts; 0 when an axis has none).
int sweepSize(const QList<SweepAxis>& axes);

// The runs: `base` with every combination of values (the first axis varies slowest), each named
// "<base name>-<key><value>..." and writing into a sibling folder of the base output folder of that name.
// Values are checked by the engine's parser: throws std::exception naming the key and value.
QList<SweepRun> expandSweep(const deltatune::RunConfig& base, const QList<SweepAxis>& axes);

}  // namespace studio
