#include "model/lora_linear.h"

namespace deltatune {

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
  cache.u = be.alloc({x.rows(), lora->r}, DType::F32);
  be.gemm(xin, false, lora->A, true, cache.u, 1.f, 0.f);
  be.gemm(cache.u, false, lora->B, true, y, lora->scaling, 1.f);
}

void linear_bwd(Backend& be, const Tensor& dy, const Tensor& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate) {
  be.gemm(dy, false, w, false, dx, 1.f, accumulate ? 1.f : 0.f);
  if (!lora) return;
  const bool dropped = rt.training && rt.dropout > 0.f;
  const Tensor& xin = dropped ? cache.xd : cache.x;
  // dB += s·dyᵀ·u ; du = s·dy·B ; dA += duᵀ·xin ; dx += dropout(du·A)
  be.gemm(dy, true, cache.u, false, lora->gB, lora->scaling, 1.f);
  Tensor du = be.alloc({dy.rows(), lora->r}, DType::F32);
  be.gemm(dy, false, lora->B, false, du, lora->scaling, 0.f);
  be.gemm(du, true, xin, false, lora->gA, 1.f, 1.f);
  if (!dropped) {
    be.gemm(du, false, lora->A, false, dx, 1.f, 1.f);
    return;
  }
  Tensor dxd = be.alloc(dx.shape, dx.dtype);
  be.gemm(du, false, lora->A, false, dxd, 1.f, 0.f);
  Tensor masked = be.alloc(dx.shape, dx.dtype);
  be.dropout(dxd, rt.dropout, lora_module_seed(rt, module_salt), masked);
  be.add(dx, masked, 1.f);
}

}  // namespace deltatune
