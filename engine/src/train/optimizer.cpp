#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace deltatune {

namespace {
std::vector<const Tensor*> lora_grads(const LoraAdapter& adapter) {
  std::vector<const Tensor*> gs;
  gs.reserve(2 * adapter.modules.size());
  for (const LoraModule& m : adapter.modules) {
    gs.push_back(&m.gA);
    gs.push_back(&m.gB);
  }
  return gs;
}
}  // namespace

double lora_grad_norm(LoraAdapter& adapter, Backend& be) { return std::sqrt(be.sum_squares_many(lora_grads(adapter))); }

bool lora_grads_finite(LoraAdapter& adapter, Backend& be) { return be.all_finite_many(lora_grads(adapter)); }

void optimizer_step(LoraAdapter& adapter, Backend& be, const OptimizerSettings& s, double lr, int64_t step,
                    double grad_norm) {
  float coef = 1.f;  // gradient clipping, folded into the update (the gradients are not rescaled in place)
  if (s.max_grad_norm > 0) {
    const double c = s.max_grad_norm / (grad_norm + 1e-6);
    if (c < 1.0) coef = static_cast<float>(c);
  }
  const bool adam = s.kind == "adamw_torch" || s.kind == "adamw";
  check(adam || s.kind == "sgd", "optimizer: unknown optimizer '" + s.kind + "' (expected adamw_torch, adamw or sgd)");
  if (!adam) {
    for (LoraModule& m : adapter.modules) {
      if (coef != 1.f) {
        be.scale(m.gA, coef);
        be.scale(m.gB, coef);
      }
      be.sgd_step(m.A, m.gA, static_cast<float>(lr), static_cast<float>(s.weight_decay));
      be.sgd_step(m.B, m.gB, static_cast<float>(lr), static_cast<float>(s.weight_decay));
    }
    return;
  }
  std::vector<Backend::AdamWSlot> slots;
  slots.reserve(2 * adapter.modules.size());
  for (LoraModule& m : adapter.modules) {
    if (!m.mA.defined()) {
      m.mA = be.zeros(m.A.shape, DType::F32);
      m.vA = be.zeros(m.A.shape, DType::F32);
      m.mB = be.zeros(m.B.shape, DType::F32);
      m.vB = be.zeros(m.B.shape, DType::F32);
    }
    slots.push_back({&m.A, &m.gA, &m.mA, &m.vA});
    slots.push_back({&m.B, &m.gB, &m.mB, &m.vB});
  }
  be.adamw_step_many(slots, static_cast<float>(lr), static_cast<float>(s.beta1), static_cast<float>(s.beta2),
                     static_cast<float>(s.eps), static_cast<float>(s.weight_decay), step, coef);
}

}  // namespace deltatune
