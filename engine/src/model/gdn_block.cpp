// Gated DeltaNet layer (spec §3.4): projections, causal depthwise conv + SiLU over q|k|v channels,
// gates, the gated delta rule, gated RMSNorm with z, output projection.
#include <cmath>
#include <optional>
#include <string>

#include "model/blocks.h"

namespace deltatune {
Tensor gdn_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                     GdnCache& k, const Tensor* residual) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), HK = cfg.lin_k_heads, HV = cfg.lin_v_heads, dk = cfg.lin_k_dim,
                dv = cfg.lin_v_dim, kd = cfg.key_dim(), vd = cfg.value_dim(), C = cfg.conv_dim();
  const DType dt = be.compute_dtype();

  k.p = be.alloc({T, C}, dt);
  k.z = be.alloc({T, vd}, dt);
  k.bl = be.alloc({T, HV}, dt);
  k.al = be.alloc({T, HV}, dt);
  const SharedInputModule in[] = {{&w.in_qkv, l.qkv, c.salt(4)}, {&w.in_z, l.z, c.salt(5)},
                                  {&w.in_b, l.b, c.salt(6)}, {&w.in_a, l.a, c.salt(7)}};
  Tensor* const in_out[] = {&k.p, &k.z, &k.bl, &k.al};
  linear_group_fwd(be, x, in, c.rt, in_out, k.lin);

  k.q = be.alloc({T, kd}, dt);
  k.k = be.alloc({T, kd}, dt);
  k.v = be.alloc({T, vd}, dt);
  Tensor* qkv[] = {&k.q, &k.k, &k.v};  // the conv's q | k | v channel blocks, each its own tensor
  be.conv1d_silu_fwd_split(k.p, w.conv, c.seq, qkv);

  if (!(c.keep_for_backward && k.o.defined())) {  // else kept by the first forward (RecomputeKeep::gdn_core)
    k.o = be.alloc({T, HV, dv}, dt);
    std::optional<Backend::GdnKeep> keep;
    if (c.keep_for_backward || c.keep_gdn_core) keep = Backend::GdnKeep::All;
    // The gates (β = σ(b), g = −e^{A_log}·softplus(a + dt_bias)) are formed inside the core.
    const Backend::GdnGateInputs gates{k.al, k.bl, w.A_log, w.dt_bias};
    const float scale = 1.f / std::sqrt(static_cast<float>(dk));
    k.core = be.gdn_gated_fwd(k.q.view({T, HK, dk}), k.k.view({T, HK, dk}), k.v.view({T, HV, dv}), gates, c.seq,
                              scale, k.o, keep);
  }

  k.y = be.alloc({T * HV, dv}, dt);
  k.rstd = be.alloc({T * HV}, DType::F32);
  be.gated_rmsnorm_fwd(k.o.view({T * HV, dv}), k.z.view({T * HV, dv}), w.lin_norm,
                       static_cast<float>(cfg.rms_eps), k.y, k.rstd);
  Tensor out = be.alloc({T, cfg.hidden_size}, dt);
  linear_fwd(be, k.y.view({T, vd}), w.out_proj, l.out, c.rt, c.salt(8), out, k.lout, residual);
  return out;
}

void gdn_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                   const GdnCache& k, Tensor& dx) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = dout.rows(), HK = cfg.lin_k_heads, HV = cfg.lin_v_heads, dk = cfg.lin_k_dim,
                dv = cfg.lin_v_dim, kd = cfg.key_dim(), vd = cfg.value_dim(), C = cfg.conv_dim();
  const DType dt = be.compute_dtype();

  Tensor dy = be.alloc({T, vd}, dt);
  linear_bwd(be, dout, w.out_proj, l.out, c.rt, c.salt(8), k.lout, dy, false);
  Tensor d_o = be.alloc({T * HV, dv}, dt), dz = be.alloc({T * HV, dv}, dt);
  be.gated_rmsnorm_bwd(dy.view({T * HV, dv}), k.o.view({T * HV, dv}), k.z.view({T * HV, dv}), w.lin_norm,
                       k.rstd, d_o, dz);

  Tensor dq = be.alloc({T, HK, dk}, dt), dkk = be.alloc({T, HK, dk}, dt), dvv = be.alloc({T, HV, dv}, dt);
  Tensor dal = be.alloc({T, HV}, dt), dbl = be.alloc({T, HV}, dt);
  const Backend::GdnGateInputs gates{k.al, k.bl, w.A_log, w.dt_bias};
  const float scale = 1.f / std::sqrt(static_cast<float>(dk));
  be.gdn_gated_bwd(k.core.get(), d_o.view({T, HV, dv}), k.q.view({T, HK, dk}), k.k.view({T, HK, dk}),
                   k.v.view({T, HV, dv}), gates, c.seq, scale, dq, dkk, dvv, dal, dbl);

  const Tensor dq2 = dq.view({T, kd}), dk2 = dkk.view({T, kd}), dv2 = dvv.view({T, vd});
  const Tensor* dqkv[] = {&dq2, &dk2, &dv2};
  Tensor dp = be.alloc({T, C}, dt);
  be.conv1d_silu_bwd_split(dqkv, k.p, w.conv, c.seq, dp);

  const SharedInputModule in[] = {{&w.in_qkv, l.qkv, c.salt(4)}, {&w.in_z, l.z, c.salt(5)},
                                  {&w.in_b, l.b, c.salt(6)}, {&w.in_a, l.a, c.salt(7)}};
  const Tensor dz2 = dz.view({T, vd});
  const Tensor* const din[] = {&dp, &dz2, &dbl, &dal};
  linear_group_bwd(be, din, in, c.rt, k.lin, dx, false);
}

}  // namespace deltatune
