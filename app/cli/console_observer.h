// Prints a run's progress to the terminal (one line per logged step, with the time left).
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "deltatune/trainer.h"

namespace deltatune::cli {

class ConsoleObserver : public RunObserver {
 public:
  explicit ConsoleObserver(int64_t logging_steps = 1) : every_(logging_steps > 0 ? logging_steps : 1) {}
  void on_log(LogLevel level, const std::string& message) override {
    const char* tag = level == LogLevel::Error ? "error" : level == LogLevel::Warning ? "warning" : "info";
    std::fprintf(stderr, "[%s] %s\n", tag, message.c_str());
  }
  void on_started(const std::string& run_id, int64_t total_steps) override {
    std::fprintf(stderr, "[info] run %s: %lld optimizer steps\n", run_id.c_str(), static_cast<long long>(total_steps));
  }
  void on_step(const StepMetrics& m) override {
    const double eta = eta_seconds(m);
    if (m.step % every_ != 0 && m.step != m.total_steps && m.eval_loss < 0) return;
    std::printf("step %lld/%lld  epoch %.2f  loss %.4f", static_cast<long long>(m.step),
                static_cast<long long>(m.total_steps), m.epoch, m.loss);
    if (m.eval_loss >= 0) std::printf("  eval_loss %.4f", m.eval_loss);
    std::printf("  lr %.3g  grad_norm %.3f  tok/s %.0f", m.lr, m.grad_norm, m.tokens_per_second);
    if (m.moe_load_max_ratio >= 0) std::printf("  moe_load max/mean %.2f cv %.3f", m.moe_load_max_ratio, m.moe_load_cv);
    if (eta >= 0) std::printf("  ETA %s", format_duration(eta).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  void on_checkpoint(int64_t step, const std::string& path) override {
    std::fprintf(stderr, "[info] checkpoint at step %lld: %s\n", static_cast<long long>(step), path.c_str());
  }
  void on_finished(const std::string& status, const std::string& message) override {
    std::fprintf(stderr, "[%s] %s\n", status.c_str(), message.c_str());
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Seconds left at this process' pace: the time per step since the first step it saw (a resumed run's
  // earlier steps may have run at another speed), or the run's average before a second step is seen.
  // -1 while unknown.
  double eta_seconds(const StepMetrics& m) {
    const Clock::time_point now = Clock::now();
    if (first_step_ < 0) {
      first_step_ = m.step;
      first_time_ = now;
    }
    if (m.step >= m.total_steps) return 0;
    double per_step = -1;
    if (m.step > first_step_)
      per_step = std::chrono::duration<double>(now - first_time_).count() / static_cast<double>(m.step - first_step_);
    else if (m.step > 0 && m.wall_seconds > 0)
      per_step = m.wall_seconds / static_cast<double>(m.step);
    return per_step < 0 ? -1 : per_step * static_cast<double>(m.total_steps - m.step);
  }

  // "42s", "3m05s", "2h07m".
  static std::string format_duration(double seconds) {
    const long long s = static_cast<long long>(seconds + 0.5);
    char buf[32];
    if (s < 60)
      std::snprintf(buf, sizeof buf, "%llds", s);
    else if (s < 3600)
      std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
    return buf;
  }

  int64_t every_;
  int64_t first_step_ = -1;
  Clock::time_point first_time_;
};

}  // namespace deltatune::cli
