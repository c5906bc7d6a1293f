// The per-step scalars of torch.optim.AdamW (decoupled weight decay), formed exactly as the CPU reference
// and torch form them, so both backends apply the same fp32 update. Host-includable (no CUDA syntax).
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace deltatune {

// The double a user meant when they wrote a hyperparameter that reached us as a float: the shortest
// decimal that round-trips the float (0.999f -> "0.999" -> 0.999). torch forms its optimizer scalars
// from Python doubles, so 1 − β₂ is 1e-3 there, not 1 − 0.999f = 0.00099998713.
inline double as_decimal(float f) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf - 1, f);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

struct AdamwScalars {
  float decay;          // 1 − lr·wd
  float lerp_w;         // 1 − β1 (torch lerp weight for m)
  float b2, one_minus_b2;
  float neg_step_size;  // −lr / (1 − β1^step)
  float bc2_sqrt;       // sqrt(1 − β2^step)
  float eps;
  bool weight_decay;
};

inline AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const double lr_d = as_decimal(lr), b1_d = as_decimal(beta1), b2_d = as_decimal(beta2);
  AdamwScalars s{};
  s.decay = static_cast<float>(1.0 - lr_d * as_decimal(weight_decay));
  s.lerp_w = static_cast<float>(1.0 - b1_d);
  s.b2 = beta2;
  s.one_minus_b2 = static_cast<float>(1.0 - b2_d);
  s.neg_step_size = static_cast<float>(-(lr_d / (1.0 - std::pow(b1_d, double(step)))));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2_d, double(step))));
  s.eps = eps;
  s.weight_decay = weight_decay != 0.f;
  return s;
}

}  // namespace deltatune
