// SwiGLU MLP (spec §3.7): down(silu(gate(x)) ⊙ up(x)).
#include <optional>

#include "model/blocks.h"

namespace deltatune {

namespace {
// gate/up and SwiGLU into k; returns h.
const Tensor& mlp_fwd_gated(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, LoraModule* lg,
                            LoraModule* lu, int salt0, const Tensor& x, MlpCache& k) {
  Backend& be = c.be;
  const int64_t T = x.rows(), I = gate_w.dim(0);
  const DType dt = be.compute_dtype();
  k.g = be.alloc({T, I}, dt);
  k.u = be.alloc({T, I}, dt);
  const SharedInputModule gu[] = {{&gate_w, lg, c.salt(salt0)}, {&up_w, lu, c.salt(salt0 + 1)}};
  Tensor* const gu_out[] = {&k.g, &k.u};
  // Grouped: the base GEMMs write their products alone and the SwiGLU adds the two rank-r terms on the way (the
  // sums written back over g and u only for a recompute that reads them; the backward forms them itself).
  const bool deferred = linear_group_fwd(be, x, gu, c.rt, gu_out, k.lgu, true);
  k.h = be.alloc({T, I}, dt);
  k.gu_sums = true;
  if (deferred) {
    const int64_t r = lg->r;
    k.gu_sums = be.lora_swiglu_fwd({k.lgu.u, 0, r}, lora_factor_b(*lg), lg->scaling, {k.lgu.u, r, r},
                                   lora_factor_b(*lu), lu->scaling, k.g, k.u, k.h, c.keep_mlp_gu);
  } else {
    be.swiglu_fwd(k.g, k.u, k.h);
  }
  return k.h;
}
}  // namespace

Tensor mlp_fwd(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, const BaseMatrix& down_w,
               LoraModule* lg, LoraModule* lu, LoraModule* ld, int salt0, const Tensor& x, MlpCache& k,
               const Tensor* residual) {
  Backend& be = c.be;
  const Tensor& h = mlp_fwd_gated(c, gate_w, up_w, lg, lu, salt0, x, k);
  Tensor out = be.alloc({x.rows(), down_w.dim(0)}, be.compute_dtype());
  linear_fwd(be, h, down_w, ld, c.rt, c.salt(salt0 + 2), out, k.ld, residual);
  return out;
}

void mlp_fwd_cache(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, LoraModule* lg,
                   LoraModule* lu, LoraModule* ld, int salt0, const Tensor& x, MlpCache& k) {
  if (k.g.defined() && k.u.defined()) {  // kept by the first forward (RecomputeKeep::mlp): no base GEMMs
    const SharedInputModule gu[] = {{&gate_w, lg, c.salt(salt0)}, {&up_w, lu, c.salt(salt0 + 1)}};
    linear_group_fwd_cache(c.be, x, gu, c.rt, k.lgu);
    k.h = c.be.alloc(k.g.shape, c.be.compute_dtype());
    c.be.swiglu_fwd(k.g, k.u, k.h);
  } else {
    mlp_fwd_gated(c, gate_w, up_w, lg, lu, salt0, x, k);
  }
  linear_fwd_cache(c.be, k.h, ld, c.rt, c.salt(salt0 + 2), k.ld);
}

void mlp_bwd(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, const BaseMatrix& down_w,
             LoraModule* lg, LoraModule* lu, LoraModule* ld, int salt0, const Tensor& dout, const MlpCache& k,
             Tensor& dx, bool accumulate) {
  Backend& be = c.be;
  const int64_t T = dout.rows(), I = gate_w.dim(0);
  const DType dt = be.compute_dtype();
  Tensor dh = be.alloc({T, I}, dt);
  // The down projection's rank-r term of dh (du_down·A) added inside the SwiGLU backward where it can be.
  Tensor dr;
  const bool deferred = linear_bwd(be, dout, down_w, ld, c.rt, c.salt(salt0 + 2), k.ld, dh, false, &dr);
  Tensor dg = be.alloc({T, I}, dt), du = be.alloc({T, I}, dt);
  if (deferred || !k.gu_sums) {
    std::optional<Backend::GateUpTerms> terms;
    if (!k.gu_sums) {
      const int64_t r = lg->r;
      terms = Backend::GateUpTerms{{k.lgu.u, 0, r}, {k.lgu.u, r, r}, lora_factor_b(*lg), lora_factor_b(*lu),
                                   lg->scaling, lu->scaling};
    }
    be.lora_swiglu_bwd(dh, dr, deferred ? lora_factor_a(*ld) : Tensor(), k.g, k.u, dg, du,
                       terms ? &*terms : nullptr);
  } else {
    be.swiglu_bwd(dh, k.g, k.u, dg, du);
  }
  const SharedInputModule gu[] = {{&gate_w, lg, c.salt(salt0)}, {&up_w, lu, c.salt(salt0 + 1)}};
  const Tensor* const dgu[] = {&dg, &du};
  linear_group_bwd(be, dgu, gu, c.rt, k.lgu, dx, accumulate);
}

}  // namespace deltatune
