// Gated full attention (spec §3.6): q/gate interleaved per head in q_proj, q/k zero-centred RMSNorm,
// partial NeoX RoPE, causal GQA attention within each packed sequence, sigmoid output gate. q and gate stay
// in q_proj's output rows (per head: q | gate), read there by the q norm and the gate, and their gradients
// are written there (the *_cols ops: no column copies).
#include <cmath>

#include "model/blocks.h"

namespace deltatune {
namespace {

// Multimodal positions when the batch has images (Qwen3.5's interleaved mrope), else the 1-D positions.
void apply_rope(const BlockContext& c, Tensor& x, bool inverse) {
  const auto theta = static_cast<float>(c.cfg.rope_theta);
  if (c.seq.mrope_positions.defined())
    c.be.rope_multimodal(x, c.seq.mrope_positions, c.cfg.rotary_dim(), theta, c.cfg.mrope_section, inverse);
  else
    c.be.rope(x, c.seq.positions, c.cfg.rotary_dim(), theta, inverse);
}

}  // namespace

Tensor attention_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                           const Tensor& x, AttnCache& k, const Tensor* residual) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), nH = cfg.num_heads, nKV = cfg.num_kv_heads, hd = cfg.head_dim;
  const DType dt = be.compute_dtype();
  const float eps = static_cast<float>(cfg.rms_eps);

  Tensor qg = be.alloc({T, nH * 2 * hd}, dt);
  k.k = be.alloc({T, nKV * hd}, dt);
  k.v = be.alloc({T, nKV * hd}, dt);
  const SharedInputModule qkv[] = {
      {&w.q_proj, l.q, c.salt(0)}, {&w.k_proj, l.k, c.salt(1)}, {&w.v_proj, l.v, c.salt(2)}};
  Tensor* const qkv_out[] = {&qg, &k.k, &k.v};
  linear_group_fwd(be, x, qkv, c.rt, qkv_out, k.lqkv);
  k.qg = qg.view({T * nH, 2 * hd});

  k.qn = be.alloc({T * nH, hd}, dt);
  k.rstd_q = be.alloc({T * nH}, DType::F32);
  be.rmsnorm_fwd_cols({k.qg, 0, hd}, w.q_norm, eps, true, k.qn, k.rstd_q);
  k.kn = be.alloc({T * nKV, hd}, dt);
  k.rstd_k = be.alloc({T * nKV}, DType::F32);
  be.rmsnorm_fwd(k.k.view({T * nKV, hd}), w.k_norm, eps, true, k.kn, k.rstd_k);
  k.qn = k.qn.view({T, nH, hd});
  k.kn = k.kn.view({T, nKV, hd});
  apply_rope(c, k.qn, false);
  apply_rope(c, k.kn, false);

  if (!(c.keep_for_backward && k.o.defined())) {  // else kept by the first forward (RecomputeKeep::attn_core)
    k.o = be.alloc({T, nH, hd}, dt);
    k.lse = be.alloc({T, nH}, DType::F32);
    be.attention_fwd(k.qn, k.kn, k.v.view({T, nKV, hd}), c.seq, 1.f / std::sqrt(static_cast<float>(hd)), k.o,
                     k.lse);
  }
  k.og = be.alloc({T, nH * hd}, dt);
  be.sigmoid_mul_fwd_cols(k.o.view({T, nH * hd}), {k.qg, hd, hd}, k.og);
  Tensor out = be.alloc({T, cfg.hidden_size}, dt);
  linear_fwd(be, k.og, w.o_proj, l.o, c.rt, c.salt(3), out, k.lo, residual);
  return out;
}

void attention_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                         const Tensor& dout, const AttnCache& k, Tensor& dx) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = dout.rows(), nH = cfg.num_heads, nKV = cfg.num_kv_heads, hd = cfg.head_dim;
  const DType dt = be.compute_dtype();

  Tensor dog = be.alloc({T, nH * hd}, dt);
  linear_bwd(be, dout, w.o_proj, l.o, c.rt, c.salt(3), k.lo, dog, false);
  Tensor d_o = be.alloc({T, nH * hd}, dt), dqg = be.alloc({T * nH, 2 * hd}, dt);  // dqg: rows of dq | dgate
  be.sigmoid_mul_bwd_cols(dog, k.o.view({T, nH * hd}), {k.qg, hd, hd}, d_o, {dqg, hd, hd});

  Tensor dqn = be.alloc({T, nH, hd}, dt), dkn = be.alloc({T, nKV, hd}, dt), dv = be.alloc({T, nKV * hd}, dt);
  Tensor dv3 = dv.view({T, nKV, hd});
  be.attention_bwd(d_o.view({T, nH, hd}), k.qn, k.kn, k.v.view({T, nKV, hd}), k.o, k.lse, c.seq,
                   1.f / std::sqrt(static_cast<float>(hd)), dqn, dkn, dv3);
  apply_rope(c, dqn, true);
  apply_rope(c, dkn, true);

  Tensor dk = be.alloc({T * nKV, hd}, dt);
  be.rmsnorm_bwd_cols(dqn.view({T * nH, hd}), {k.qg, 0, hd}, w.q_norm, k.rstd_q, true, {dqg, 0, hd});
  be.rmsnorm_bwd(dkn.view({T * nKV, hd}), k.k.view({T * nKV, hd}), w.k_norm, k.rstd_k, true, dk);

  const SharedInputModule qkv[] = {
      {&w.q_proj, l.q, c.salt(0)}, {&w.k_proj, l.k, c.salt(1)}, {&w.v_proj, l.v, c.salt(2)}};
  const Tensor dqg2 = dqg.view({T, nH * 2 * hd}), dk2 = dk.view({T, nKV * hd});
  const Tensor* const dqkv[] = {&dqg2, &dk2, &dv};
  linear_group_bwd(be, dqkv, qkv, c.rt, k.lqkv, dx, false);
}

}  // namespace deltatune
