#include "model/lora_linear.h"

#include "backend/quant_ops.h"

namespace deltatune {

namespace {
const Tensor& factor_a(const LoraModule& m) { return m.Ac.defined() ? m.Ac : m.A; }
const Tensor& factor_b(const LoraModule& m) { return m.Bc.defined() ? m.Bc : m.B; }
}  // namespace

// The scratch is freed when the caller's product is enqueued (quantized base, core/quantized.h).
Tensor plain_weight(Backend& be, const BaseMatrix& m) {
  if (!m.q) return m.w;
  Tensor d = be.alloc(m.q->shape, be.compute_dtype());
  quant_ops(be).dequantize(*m.q, d);
  return d;
}

LoraComputeCopies::LoraComputeCopies(Backend& be, LoraAdapter* lora) {
  if (!lora || be.compute_dtype() == DType::F32) return;
  lora_ = lora;
  std::vector<Backend::CopyPair> pairs;
  for (LoraModule& m : lora->modules) {
    if (m.experts > 0 || m.A.dtype == be.compute_dtype()) continue;
    m.Ac = be.alloc(m.A.shape, be.compute_dtype());
    m.Bc = be.alloc(m.B.shape, be.compute_dtype());
    pairs.push_back({&m.Ac, &m.A});
    pairs.push_back({&m.Bc, &m.B});
  }
  be.copy_many(pairs);
}

LoraComputeCopies::~LoraComputeCopies() {
  if (!lora_) return;
  for (LoraModule& m : lora_->modules) {
    m.Ac = Tensor();
    m.Bc = Tensor();
  }
}

void linear_fwd(Backend& be, const Tensor& x, const BaseMatrix& wq, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, Tensor& y, LinearCache& cache) {
  const Tensor w = plain_weight(be, wq);
  cache.x = x;
  if (!lora) {
    be.gemm(x, false, w, true, y, 1.f, 0.f);
    return;
  }
  Tensor xin = x;
  if (rt.training && rt.dropout > 0.f) {
    cache.xd = be.alloc(x.shape, x.dtype);
    be.dropout(x, rt.dropout, lora_module_seed(rt, module_salt), cache.xd);
    xin = cache.xd;
  }
  cache.u = be.alloc({x.rows(), lora->r}, be.compute_dtype());
  be.gemm(xin, false, factor_a(*lora), true, cache.u, 1.f, 0.f);
  // The rank-r term first, then the base product accumulates into it: the base GEMM's epilogue reads y once,
  // where adding the rank-r term afterwards took another read and write of the whole output.
  be.gemm(cache.u, false, factor_b(*lora), true, y, lora->scaling, 0.f);
  be.gemm(x, false, w, true, y, 1.f, 1.f);
}

void linear_bwd(Backend& be, const Tensor& dy, const BaseMatrix& wq, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate) {
  const Tensor w = plain_weight(be, wq);
  const float dx_beta = accumulate ? 1.f : 0.f;
  if (!lora) {
    be.gemm(dy, false, w, false, dx, 1.f, dx_beta);
    return;
  }
  const bool dropped = rt.training && rt.dropout > 0.f;
  const Tensor& xin = dropped ? cache.xd : cache.x;
  // dB += s·dyᵀ·u ; du = s·dy·B ; dA += duᵀ·xin ; dx (+)= dropout(du·A), then dx += dy·W (as in linear_fwd,
  // the base product goes last and accumulates in its epilogue).
  be.gemm(dy, true, cache.u, false, lora->gB, lora->scaling, 1.f);
  Tensor du = be.alloc({dy.rows(), lora->r}, be.compute_dtype());  // like u: the operand type of both its products
  be.gemm(dy, false, factor_b(*lora), false, du, lora->scaling, 0.f);
  be.gemm(du, true, xin, false, lora->gA, 1.f, 1.f);
  if (!dropped) {
    be.gemm(du, false, factor_a(*lora), false, dx, 1.f, dx_beta);
  } else {
    Tensor dxd = be.alloc(dx.shape, dx.dtype);
    be.gemm(du, false, factor_a(*lora), false, dxd, 1.f, 0.f);
    Tensor masked = be.alloc(dx.shape, dx.dtype);
    be.dropout(dxd, rt.dropout, lora_module_seed(rt, module_salt), masked);
    if (accumulate) be.add(dx, masked, 1.f);
    else be.copy(dx, masked);
  }
  be.gemm(dy, false, w, false, dx, 1.f, 1.f);
}

}  // namespace deltatune
