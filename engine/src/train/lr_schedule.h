// Learning-rate schedules with linear warmup, as transformers' get_*_schedule_with_warmup: the rate of
// optimizer step s (1-based) is base · λ(s − 1).
#pragma once
#include <cstdint>
#include <string>

namespace deltatune {

double lr_at_step(const std::string& schedule, double base_lr, int64_t step, int64_t warmup_steps,
                  int64_t total_steps);

}  // namespace deltatune
