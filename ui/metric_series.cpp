#include "metric_series.h"

#include <cmath>

namespace studio {

QString metricName(Metric m) {
  switch (m) {
    case Metric::Loss:
      return QStringLiteral("Loss");
    case Metric::EvalLoss:
      return QStringLiteral("Eval loss");
    case Metric::LearningRate:
      return QStringLiteral("Learning rate");
    case Metric::GradNorm:
      return QStringLiteral("Grad norm");
    case Metric::TokensPerSecond:
      return QStringLiteral("Tokens/s");
    case Metric::VramAllocated:
      return QStringLiteral("VRAM allocated (GiB)");
    case Metric::VramReserved:
      return QStringLiteral("VRAM reserved (GiB)");
    case Metric::MoeLoadMaxRatio:
      return QStringLiteral("MoE load max/mean");
    case Metric::MoeLoadCv:
      return QStringLiteral("MoE load CV");
  }
  return {};
}

QString axisName(Axis a) {
  switch (a) {
    case Axis::Step:
      return QStringLiteral("Step");
    case Axis::TokensSeen:
      return QStringLiteral("Tokens seen");
    case Axis::WallTime:
      return QStringLiteral("Wall time (s)");
  }
  return {};
}

double axisValue(const deltatune::StepMetrics& m, Axis a) {
  switch (a) {
    case Axis::Step:
      return static_cast<double>(m.step);
    case Axis::TokensSeen:
      return static_cast<double>(m.tokens_seen);
    case Axis::WallTime:
      return m.wall_seconds;
  }
  return 0;
}

std::optional<double> metricValue(const deltatune::StepMetrics& m, Metric metric) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  double v = 0;
  switch (metric) {
    case Metric::Loss:
      v = m.loss;
      break;
    case Metric::EvalLoss:
      if (m.eval_loss < 0) return std::nullopt;
      v = m.eval_loss;
      break;
    case Metric::LearningRate:
      v = m.lr;
      break;
    case Metric::GradNorm:
      v = m.grad_norm;
      break;
    case Metric::TokensPerSecond:
      v = m.tokens_per_second;
      break;
    case Metric::VramAllocated:
      v = static_cast<double>(m.vram_allocated) / kGiB;
      break;
    case Metric::VramReserved:
      v = static_cast<double>(m.vram_reserved) / kGiB;
      break;
    case Metric::MoeLoadMaxRatio:
      if (m.moe_load_max_ratio < 0) return std::nullopt;  // dense model
      v = m.moe_load_max_ratio;
      break;
    case Metric::MoeLoadCv:
      if (m.moe_load_cv < 0) return std::nullopt;
      v = m.moe_load_cv;
      break;
  }
  // A NaN loss is drawn as a gap rather than breaking the axis range.
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

Series seriesOf(const std::vector<deltatune::StepMetrics>& steps, Axis a, Metric metric) {
  Series s;
  s.x.reserve(static_cast<qsizetype>(steps.size()));
  s.y.reserve(static_cast<qsizetype>(steps.size()));
  for (const auto& m : steps) {
    if (auto v = metricValue(m, metric)) {
      s.x.append(axisValue(m, a));
      s.y.append(*v);
    }
  }
  return s;
}

}  // namespace studio
