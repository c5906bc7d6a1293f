// y = x·Wᵀ (+ s·(dropout(x)·Aᵀ)·Bᵀ when a LoRA module is attached), forward and backward.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/quantized.h"
#include "lora/lora.h"

namespace deltatune {

// A frozen base matrix on the backend: plain (`w`, in the weight dtype) or held quantized (`q`), which the
// products below dequantize into a scratch matrix right before their GEMM.
struct BaseMatrix {
  Tensor w;
  std::shared_ptr<const QuantizedWeight> q;
  BaseMatrix() = default;
  BaseMatrix(Tensor plain) : w(std::move(plain)) {}  // NOLINT: a plain matrix is a BaseMatrix
  explicit BaseMatrix(std::shared_ptr<const QuantizedWeight> quantized) : q(std::move(quantized)) {}
  bool defined() const { return q != nullptr || w.defined(); }
  int64_t dim(int i) const { return q ? q->shape.at(static_cast<size_t>(i < 0 ? i + 2 : i)) : w.dim(i); }
};

// The plain tensor of a frozen weight: itself, or a scratch copy in the compute dtype dequantized right before the
// GEMM that reads it (shaped as the quantized matrix [rows, cols]; view it to the weight's own shape).
Tensor plain_weight(Backend& be, const BaseMatrix& m);

struct LinearCache {
  Tensor x;   // input (kept by reference: the caller's tensor)
  Tensor xd;  // dropout(x) when dropout > 0
  Tensor u;   // xd·Aᵀ [T, r] in the compute dtype (the operand type of both products that read it)
};

struct LoraRuntime {
  float dropout = 0.f;
  uint64_t dropout_seed = 0;  // per step; each module mixes in its own index
  bool training = false;
};

// Dropout seed of one module for this step (the module salt mixed into the step seed).
inline uint64_t lora_module_seed(const LoraRuntime& rt, uint64_t salt) {
  return rt.dropout_seed ^ (salt * 0xD1B54A32D192ED03ull);
}

// Compute-dtype copies (Ac, Bc) of the factors of every linear LoRA module for one forward/backward, so the
// LoRA products read bf16 factors as they are instead of converting the F32 masters at every use (4 conversions
// per module and step instead of 4 per use). Dropped when the scope ends: an optimizer step never meets a stale
// copy. Nothing happens when the backend computes in F32, and expert modules keep their own path.
class LoraComputeCopies {
 public:
  LoraComputeCopies(Backend& be, LoraAdapter* lora);
  ~LoraComputeCopies();
  LoraComputeCopies(const LoraComputeCopies&) = delete;
  LoraComputeCopies& operator=(const LoraComputeCopies&) = delete;

 private:
  LoraAdapter* lora_ = nullptr;
};

// y (=) x·Wᵀ + LoRA. W [out, in]; x [T, in]; y [T, out].
void linear_fwd(Backend& be, const Tensor& x, const BaseMatrix& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, Tensor& y, LinearCache& cache);
// dx (=) or (+=) dy·W + LoRA path; LoRA gradients (+=) into lora->gA/gB.
void linear_bwd(Backend& be, const Tensor& dy, const BaseMatrix& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate);

}  // namespace deltatune
