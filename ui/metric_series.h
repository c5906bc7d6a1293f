// Which numbers of a StepMetrics go on a plot: used by the live plots and the experiments overlay.
#pragma once
#include <QString>
#include <QVector>
#include <optional>
#include <vector>

#include "deltatune/trainer.h"

namespace studio {

// MoeLoad*: router load balance of MoE runs (max/mean tokens per expert, and its coefficient of variation;
// 1 and 0 are perfectly balanced); dense runs have none.
enum class Metric {
  Loss,
  EvalLoss,
  LearningRate,
  GradNorm,
  TokensPerSecond,
  VramAllocated,
  VramReserved,
  MoeLoadMaxRatio,
  MoeLoadCv
};
enum class Axis { Step, TokensSeen, WallTime };

QString metricName(Metric m);
QString axisName(Axis a);

double axisValue(const deltatune::StepMetrics& m, Axis a);
// Empty when the step has no value for the metric (eval loss only exists on eval steps).
std::optional<double> metricValue(const deltatune::StepMetrics& m, Metric metric);

struct Series {
  QVector<double> x, y;
};
Series seriesOf(const std::vector<deltatune::StepMetrics>& steps, Axis a, Metric metric);

}  // namespace studio
