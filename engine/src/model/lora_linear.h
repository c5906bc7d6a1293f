// y = x·Wᵀ (+ s·(dropout(x)·Aᵀ)·Bᵀ when a LoRA module is attached), forward and backward.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/quantized.h"
#include "lora/lora.h"

namespace deltatune {

// A frozen base matrix on the backend: plain (`w`, in the weight dtype) or held quantized (`q`), which the
// products below dequantize into a scratch matrix right before their GEMM. A plain matrix may be padded for the
// K-concatenated LoRA products (kcat_pad_weights): w is then [out, in + pad], the matrix its first `in` columns
// and s·B of its LoRA module (with zero blocks before it) in the `pad` columns after them.
struct BaseMatrix {
  Tensor w;
  std::shared_ptr<const QuantizedWeight> q;
  int64_t pad = 0;
  BaseMatrix() = default;
  BaseMatrix(Tensor plain) : w(std::move(plain)) {}  // NOLINT: a plain matrix is a BaseMatrix
  explicit BaseMatrix(std::shared_ptr<const QuantizedWeight> quantized) : q(std::move(quantized)) {}
  bool defined() const { return q != nullptr || w.defined(); }
  int64_t dim(int i) const {
    const auto d = static_cast<size_t>(i < 0 ? i + 2 : i);
    return q ? q->shape.at(d) : w.dim(static_cast<int>(d)) - (d == 1 ? pad : 0);
  }
};

// The plain tensor of a frozen weight: itself, or a scratch copy in the compute dtype dequantized right before the
// GEMM that reads it (shaped as the quantized matrix [rows, cols]; view it to the weight's own shape). Not for a
// padded matrix (base_gemm reads its columns in place).
Tensor plain_weight(Backend& be, const BaseMatrix& m);
// y (=) x·Wᵀ (trans_w) or x·W, plus beta·y, for a frozen base matrix: FP8 weights as FP8 GEMMs where the backend
// has them (QuantOps::fp8_gemm), otherwise through plain_weight.
void base_gemm(Backend& be, const Tensor& x, const BaseMatrix& w, bool trans_w, Tensor& y, float beta);

// The factors a module's products read: the compute-dtype copies (LoraComputeCopies) where made, else the masters.
const Tensor& lora_factor_a(const LoraModule& m);
const Tensor& lora_factor_b(const LoraModule& m);

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
// copy. Modules that share an input get their A copies stacked (linear_group_fwd), on an F32 backend too; other
// factors already in the compute dtype are read as they are, and expert modules keep their own path.
class LoraComputeCopies {
 public:
  LoraComputeCopies(Backend& be, LoraAdapter* lora);
  ~LoraComputeCopies();
  LoraComputeCopies(const LoraComputeCopies&) = delete;
  LoraComputeCopies& operator=(const LoraComputeCopies&) = delete;

 private:
  LoraAdapter* lora_ = nullptr;
};

// Linear modules that read one input x (attention q/k/v, the GDN in_proj qkv/z/b/a, MLP gate/up), in the order
// of lora_input_share_rank(). When each has a LoRA module of the same rank whose compute-dtype A copies
// LoraComputeCopies stacked in that order, and no dropout applies, their LoRA products read x once: u of every
// module is one [T, Σr] GEMM forward, and the backward's dx takes every du in one GEMM; otherwise each module
// runs linear_fwd / linear_bwd.
struct SharedInputModule {
  const BaseMatrix* w = nullptr;
  LoraModule* lora = nullptr;
  uint64_t salt = 0;
};
struct LinearGroupCache {
  Tensor x;                         // input (kept by reference)
  Tensor u;                         // grouped: [T, Σr], module i's u in columns [i·r, (i+1)·r)
  std::vector<LinearCache> each;    // not grouped: one cache per module
  int64_t kcat = 0;                 // K-concatenated: x is [T, in + Σr] with u in its last Σr columns (u unset)
};
// K-concatenation of the grouped products (CUDA, bf16): y_i (=) [x | u]·[W_i | 0 .. s_i·B_i]ᵀ as one GEMM of
// K = in + (i+1)·r, with x's rows padded by Σr columns that the u GEMM writes (the caller allocates x as
// [T, in + Σr] and forms x in its first `in` columns; LoraKcatOps::rmsnorm_fwd_into), so the rank-r terms need
// no own pass over y. Member i's base matrix is padded by (i+1)·r columns (kcat_pad_weights, once) holding zeros,
// then s_i·B_i (kcat_write_tails, every step after LoraComputeCopies). The backward is the grouped one with x and
// u read from the padded rows. Returns Σr when the group runs so (linear_group_fwd takes x of that width), else 0.
int64_t kcat_cols(Backend& be, std::span<const SharedInputModule> ms, const LoraRuntime& rt);
// A group of modules that share an input, for kcat_pad_weights: their base matrices and LoRA modules in
// lora_input_share_rank order.
struct KcatPadGroup {
  std::vector<BaseMatrix*> ws;
  std::vector<LoraModule*> loras;
};
// Pads the groups' base matrices for kcat_cols where the backend has LoraKcatOps, the compute dtype is bf16 and
// every member is a plain bf16 matrix with a LoRA module of one rank (a multiple of 8); a matrix padded for
// another rank is padded again. The padded matrices of several groups share an allocation (up to 256 MiB), and
// the replaced ones go back to the device (LoraKcatOps::release_cached_memory). Returns how many groups are
// padded for their modules now.
size_t kcat_pad_weights(Backend& be, std::span<KcatPadGroup> groups);
// Writes s_i·B_i (the compute copies) into the padded members' tails: after LoraComputeCopies, before a forward.
void kcat_write_tails(Backend& be, std::span<const SharedInputModule> ms);
// ys[i] (=) x·W_iᵀ + LoRA_i. With defer_rank_r, where the products are grouped (cache.u formed), ys[i] (=) x·W_iᵀ
// alone and the caller adds each rank-r term s_i·u_i·B_iᵀ (u_i: columns [i·r, (i+1)·r) of cache.u; B_i:
// lora_factor_b) itself; returns whether it is left to the caller.
bool linear_group_fwd(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms, const LoraRuntime& rt,
                      std::span<Tensor* const> ys, LinearGroupCache& cache, bool defer_rank_r = false);
// What linear_group_bwd reads of linear_group_fwd, without the outputs (a checkpointed layer's recompute whose
// outputs were kept by its first forward: RecomputeKeep): the same cache, the base products skipped.
void linear_group_fwd_cache(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms,
                            const LoraRuntime& rt, LinearGroupCache& cache);
// dx (=) or (+=) Σ_i (dy_i·W_i + LoRA path_i); LoRA gradients (+=).
void linear_group_bwd(Backend& be, std::span<const Tensor* const> dys, std::span<const SharedInputModule> ms,
                      const LoraRuntime& rt, const LinearGroupCache& cache, Tensor& dx, bool accumulate);

// y (=) x·Wᵀ + LoRA, plus residual when given (read by the rank-r term, or copied into y without LoRA; the base
// GEMM accumulates in its epilogue). W [out, in]; x [T, in]; y and residual [T, out].
void linear_fwd(Backend& be, const Tensor& x, const BaseMatrix& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, Tensor& y, LinearCache& cache, const Tensor* residual = nullptr);
// What linear_bwd reads of linear_fwd (x, dropout(x), u = x·Aᵀ) without y: a forward whose output nothing
// reads (a checkpointed layer's recompute of its last product) skips the base product and the rank-r term.
void linear_fwd_cache(Backend& be, const Tensor& x, LoraModule* lora, const LoraRuntime& rt, uint64_t module_salt,
                      LinearCache& cache);
// dx (=) or (+=) dy·W + LoRA path; LoRA gradients (+=) into lora->gA/gB. With deferred_du, where the module has
// LoRA and no dropout applies, dx gets the base product alone and *deferred_du (=) du [T, r], whose du·A
// (lora_factor_a) the caller adds; returns whether it is left to the caller.
bool linear_bwd(Backend& be, const Tensor& dy, const BaseMatrix& w, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate,
                Tensor* deferred_du = nullptr);

}  // namespace deltatune
