// Elementwise activations: SwiGLU (silu(gate)·up), the attention output gate (x·σ(gate)), σ, GELU (vision tower).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {
constexpr int64_t kGrain = 1 << 14;
}

void CpuBackend::swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) {
  cpu::check_same(gate, up, "swiglu up");
  cpu::check_same(gate, out, "swiglu out");
  const float* pg = cpu::f32(gate, "swiglu gate");
  const float* pu = cpu::f32(up, "swiglu up");
  float* po = cpu::f32(out, "swiglu out");
  pool_.parallel_for(gate.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = cpu::siluf(pg[i]) * pu[i];
  });
}

void CpuBackend::swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  cpu::check_same(gate, up, "swiglu_bwd up");
  cpu::check_same(gate, dout, "swiglu_bwd dout");
  cpu::check_same(gate, dgate, "swiglu_bwd dgate");
  cpu::check_same(gate, dup, "swiglu_bwd dup");
  const float* pd = cpu::f32(dout, "swiglu_bwd dout");
  const float* pg = cpu::f32(gate, "swiglu_bwd gate");
  const float* pu = cpu::f32(up, "swiglu_bwd up");
  float* pdg = cpu::f32(dgate, "swiglu_bwd dgate");
  float* pdu = cpu::f32(dup, "swiglu_bwd dup");
  pool_.parallel_for(gate.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = pg[i], d = pd[i], u = pu[i];  // read before writing: outputs may alias inputs
      pdg[i] = d * u * cpu::silu_grad(g);
      pdu[i] = d * cpu::siluf(g);
    }
  });
}

void CpuBackend::sigmoid_mul_fwd(const Tensor& x, const Tensor& gate, Tensor& out) {
  cpu::check_same(x, gate, "sigmoid_mul gate");
  cpu::check_same(x, out, "sigmoid_mul out");
  const float* px = cpu::f32(x, "sigmoid_mul x");
  const float* pg = cpu::f32(gate, "sigmoid_mul gate");
  float* po = cpu::f32(out, "sigmoid_mul out");
  pool_.parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = px[i] * cpu::sigmoidf(pg[i]);
  });
}

void CpuBackend::sigmoid_mul_bwd(const Tensor& dout, const Tensor& x, const Tensor& gate, Tensor& dx,
                                 Tensor& dgate) {
  cpu::check_same(x, gate, "sigmoid_mul_bwd gate");
  cpu::check_same(x, dout, "sigmoid_mul_bwd dout");
  cpu::check_same(x, dx, "sigmoid_mul_bwd dx");
  cpu::check_same(x, dgate, "sigmoid_mul_bwd dgate");
  const float* pd = cpu::f32(dout, "sigmoid_mul_bwd dout");
  const float* px = cpu::f32(x, "sigmoid_mul_bwd x");
  const float* pg = cpu::f32(gate, "sigmoid_mul_bwd gate");
  float* pdx = cpu::f32(dx, "sigmoid_mul_bwd dx");
  float* pdg = cpu::f32(dgate, "sigmoid_mul_bwd dgate");
  pool_.parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float s = cpu::sigmoidf(pg[i]), d = pd[i], xv = px[i];
      pdx[i] = d * s;
      pdg[i] = d * xv * s * (1.f - s);
    }
  });
}

void CpuBackend::sigmoid(const Tensor& x, Tensor& y) {
  cpu::check_same(x, y, "sigmoid y");
  const float* px = cpu::f32(x, "sigmoid x");
  float* py = cpu::f32(y, "sigmoid y");
  pool_.parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] = cpu::sigmoidf(px[i]);
  });
}

// GELU, exact: x·Φ(x), Φ' = φ; tanh form: 0.5·x·(1 + tanh(u)), u = c·(x + 0.044715·x³), c = sqrt(2/π).
namespace {
float gelu_value(float x, bool tanh_approx) {
  const double v = x;
  if (tanh_approx) return float(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
  return float(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
}
float gelu_grad(float x, bool tanh_approx) {
  const double v = x;
  if (tanh_approx) {
    const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
    return float(0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v));
  }
  return float(0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI));
}
}  // namespace

void CpuBackend::gelu_fwd(const Tensor& x, bool tanh_approx, Tensor& y) {
  cpu::check_same(x, y, "gelu y");
  const float* px = cpu::f32(x, "gelu x");
  float* py = cpu::f32(y, "gelu y");
  pool_.parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] = gelu_value(px[i], tanh_approx);
  });
}

void CpuBackend::gelu_bwd(const Tensor& dy, const Tensor& x, bool tanh_approx, Tensor& dx) {
  cpu::check_same(x, dy, "gelu_bwd dy");
  cpu::check_same(x, dx, "gelu_bwd dx");
  const float* pd = cpu::f32(dy, "gelu_bwd dy");
  const float* px = cpu::f32(x, "gelu_bwd x");
  float* pdx = cpu::f32(dx, "gelu_bwd dx");
  pool_.parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pdx[i] = pd[i] * gelu_grad(px[i], tanh_approx);
  });
}

}  // namespace deltatune
