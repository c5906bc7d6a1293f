#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace deltatune {

double lora_grad_norm(LoraAdapter& adapter, Backend& be) {
  double sum = 0;
  for (LoraModule& m : adapter.modules) sum += be.sum_squares(m.gA) + be.sum_squares(m.gB);
  return std::sqrt(sum);
}

bool lora_grads_finite(LoraAdapter& adapter, Backend& be) {
  for (LoraModule& m : adapter.modules)
    if (!be.all_finite(m.gA) || !be.all_finite(m.gB)) return false;
  return true;
}

void optimizer_step(LoraAdapter& adapter, Backend& be, const OptimizerSettings& s, double lr, int64_t step,
                    double grad_norm) {
  if (s.max_grad_norm > 0) {
    const double coef = s.max_grad_norm / (grad_norm + 1e-6);
    if (coef < 1.0) {
      for (LoraModule& m : adapter.modules) {
        be.scale(m.gA, static_cast<float>(coef));
        be.scale(m.gB, static_cast<float>(coef));
      }
    }
  }
  const bool adam = s.kind == "adamw_torch" || s.kind == "adamw";
  check(adam || s.kind == "sgd", "optimizer: unknown optimizer '" + s.kind + "' (expected adamw_torch, adamw or sgd)");
  for (LoraModule& m : adapter.modules) {
    if (!adam) {
      be.sgd_step(m.A, m.gA, static_cast<float>(lr), static_cast<float>(s.weight_decay));
      be.sgd_step(m.B, m.gB, static_cast<float>(lr), static_cast<float>(s.weight_decay));
      continue;
    }
    if (!m.mA.defined()) {
      m.mA = be.zeros(m.A.shape, DType::F32);
      m.vA = be.zeros(m.A.shape, DType::F32);
      m.mB = be.zeros(m.B.shape, DType::F32);
      m.vB = be.zeros(m.B.shape, DType::F32);
    }
    be.adamw_step(m.A, m.gA, m.mA, m.vA, static_cast<float>(lr), static_cast<float>(s.beta1),
                  static_cast<float>(s.beta2), static_cast<float>(s.eps), static_cast<float>(s.weight_decay), step);
    be.adamw_step(m.B, m.gB, m.mB, m.vB, static_cast<float>(lr), static_cast<float>(s.beta1),
                  static_cast<float>(s.beta2), static_cast<float>(s.eps), static_cast<float>(s.weight_decay), step);
  }
}

}  // namespace deltatune
