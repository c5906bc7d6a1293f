// What a backend needs for LoRA products K-concatenated into the base GEMM (model/lora_linear.cpp):
// y = [x | u]·[W | s·B]ᵀ with x's rows padded by the u columns, beside the Backend interface. CUDA has them;
// a backend without them (the CPU reference) runs the separate products.
#pragma once
#include <span>

#include "backend/backend.h"

namespace deltatune {

class LoraKcatOps {
 public:
  virtual ~LoraKcatOps() = default;
  // rmsnorm_fwd with y a column block of wider rows (width w.numel()).
  virtual void rmsnorm_fwd_into(const Tensor& x, const Tensor& w, float eps, bool zero_centred,
                                const Backend::Cols& y, Tensor& rstd) = 0;
  // dsts[i] (=) alphas[i]·srcs[i] for every i: srcs[i] [rows, r] (any float dtype, contiguous), dsts[i] a column
  // block of width r of a bf16 matrix with as many rows.
  virtual void scaled_copies_into(std::span<const Tensor* const> srcs, std::span<const float> alphas,
                                  std::span<const Backend::Cols> dsts) = 0;
  // Waits for the queued work and gives the allocator's cached (unused) blocks back to the device: after base
  // matrices were replaced by padded ones, so that their old blocks do not stay reserved.
  virtual void release_cached_memory() = 0;
};

// `be`'s K-concatenation ops, or null where it has none.
LoraKcatOps* lora_kcat_ops(Backend& be);

}  // namespace deltatune
