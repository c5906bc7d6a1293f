#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace deltatune {

double lr_at_step(const std::string& schedule, double base_lr, int64_t step, int64_t warmup_steps,
                  int64_t total_steps) {
  const double s = static_cast<double>(std::max<int64_t>(step - 1, 0));
  const double warm = static_cast<double>(warmup_steps), total = static_cast<double>(total_steps);
  if (s < warm) return base_lr * s / std::max(1.0, warm);
  if (schedule == "constant") return base_lr;
  const double progress = (s - warm) / std::max(1.0, total - warm);
  if (schedule == "linear") return base_lr * std::max(0.0, (total - s) / std::max(1.0, total - warm));
  if (schedule == "cosine") return base_lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  throw Error("lr_scheduler: unknown schedule '" + schedule + "' (expected constant, linear or cosine)");
}

}  // namespace deltatune
