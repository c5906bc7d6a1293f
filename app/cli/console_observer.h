// Prints a run's progress to the terminal (one line per logged step).
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
    if (m.step % every_ != 0 && m.step != m.total_steps && m.eval_loss < 0) return;
    std::printf("step %lld/%lld  epoch %.2f  loss %.4f", static_cast<long long>(m.step),
                static_cast<long long>(m.total_steps), m.epoch, m.loss);
    if (m.eval_loss >= 0) std::printf("  eval_loss %.4f", m.eval_loss);
    std::printf("  lr %.3g  grad_norm %.3f  tok/s %.0f", m.lr, m.grad_norm, m.tokens_per_second);
    if (m.moe_load_max_ratio >= 0) std::printf("  moe_load max/mean %.2f cv %.3f", m.moe_load_max_ratio, m.moe_load_cv);
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
  int64_t every_;
};

}  // namespace deltatune::cli
