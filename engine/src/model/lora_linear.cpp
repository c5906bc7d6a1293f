#include "model/lora_linear.h"

namespace deltatune {

namespace {
const Tensor& factor_a(const LoraModule& m) { return m.Ac.defined() ? m.Ac : m.A; }
const Tensor& factor_b(const LoraModule& m) { return m.Bc.defined() ? m.Bc : m.B; }
}  // namespace

LoraComputeCopies::LoraComputeCopies(Backend& be, LoraAdapter* lora) {
  if (!lora || be.compute_dtype() == DType::F32) return;
  lora_ = lora;
  for (LoraModule& m : lora->modules) {
    if (m.experts > 0 || m.A.dtype == be.compute_dtype()) continue;
    m.Ac = be.alloc(m.A.shape, be.compute_dtype());
    be.copy(m.Ac, m.A);
    m.Bc = be.alloc(m.B.shape, be.compute_dtype());
    be.copy(m.Bc, m.B);
  }
}

LoraComputeCopies::~LoraComputeCopies() {
  if (!lora_) return;
  for (LoraModule& m : lora_->modules) {
    m.Ac = Tensor();
    m.Bc = Tensor();
  }
}

void linear_fwd(Backend& be, const Tensor& x, const Tensor& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, Tensor& y, LinearCache& cache) {
  be.gemm(x, false, w, true, y, 1.f, 0.f);
  cache.x = x;
  if (!lora) return;
  Tensor xin = x;
  if (rt.training && rt.dropout > 0.f) {
    cache.xd = be.alloc(x.shape, x.dtype);
    be.dropout(x, rt.dropout, lora_module_seed(rt, module_salt), cache.xd);
    xin = cache.xd;
  }
  cache.u = be.alloc({x.rows(), lora->r}, be.compute_dtype());
  be.gemm(xin, false, factor_a(*lora), true, cache.u, 1.f, 0.f);
  be.gemm(cache.u, false, factor_b(*lora), true, y, lora->scaling, 1.f);
}

void linear_bwd(Backend& be, const Tensor& dy, const Tensor& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate) {
  be.gemm(dy, false, w, false, dx, 1.f, accumulate ? 1.f : 0.f);
  if (!lora) return;
  const bool dropped = rt.training && rt.dropout > 0.f;
  const Tensor& xin = dropped ? cache.xd : cache.x;
  // dB += s·dyᵀ·u ; du = s·dy·B ; dA += duᵀ·xin ; dx += dropout(du·A)
  be.gemm(dy, true, cache.u, false, lora->gB, lora->scaling, 1.f);
  Tensor du = be.alloc({dy.rows(), lora->r}, be.compute_dtype());  // like u: both its products read it so
  be.gemm(dy, false, factor_b(*lora), false, du, lora->scaling, 0.f);
  be.gemm(du, true, xin, false, lora->gA, 1.f, 1.f);
  if (!dropped) {
    be.gemm(du, false, factor_a(*lora), false, dx, 1.f, 1.f);
    return;
  }
  Tensor dxd = be.alloc(dx.shape, dx.dtype);
  be.gemm(du, false, factor_a(*lora), false, dxd, 1.f, 0.f);
  Tensor masked = be.alloc(dx.shape, dx.dtype);
  be.dropout(dxd, rt.dropout, lora_module_seed(rt, module_salt), masked);
  be.add(dx, masked, 1.f);
}

}  // namespace deltatune
