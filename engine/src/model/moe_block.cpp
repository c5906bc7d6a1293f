// Sparse MoE block (spec §3.8): softmax router, top-k renormalised weights, per-expert SwiGLU on the
// tokens routed to it, plus a shared expert scaled by σ(x·w_sgᵀ).
//
// Routed tokens are grouped per expert on the host (one download of the top-k indices per layer); the
// GPU path without a host sync is issue "MoE on the GPU".
// Expert LoRA follows PEFT's layout (peft-adapter.md §6.2): A_e = rows [e·r, (e+1)·r) of A (contiguous);
// B_e = columns {k·E + e} of B (strided), gathered into a temporary [out, r] per expert.
#include <vector>

#include "core/error.h"
#include "model/blocks.h"

namespace deltatune {
namespace {

// A per-expert view of an expert LoRA module; gB_e is copied back by expert_lora_store_grad.
LoraModule expert_lora_view(Backend& be, LoraModule* m, int e, bool with_grad) {
  LoraModule v;
  v.r = m->r;
  v.scaling = m->scaling;
  v.in = m->in;
  v.out = m->out;
  const int64_t r = m->r, E = m->experts;
  v.A = m->A.slice(e * r, (e + 1) * r);
  v.B = be.alloc({m->out, r}, DType::F32);
  for (int64_t k = 0; k < r; ++k) be.copy_cols(v.B, k, m->B, k * E + e, 1);
  if (with_grad) {
    v.gA = m->gA.slice(e * r, (e + 1) * r);
    v.gB = be.alloc({m->out, r}, DType::F32);
    for (int64_t k = 0; k < r; ++k) be.copy_cols(v.gB, k, m->gB, k * E + e, 1);
  }
  return v;
}

void expert_lora_store_grad(Backend& be, LoraModule* m, int e, const LoraModule& v) {
  const int64_t r = m->r, E = m->experts;
  for (int64_t k = 0; k < r; ++k) be.copy_cols(m->gB, k * E + e, v.gB, k, 1);
}


}  // namespace

Tensor moe_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                     MoeCache& k) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k, Ie = cfg.moe_intermediate;
  const DType dt = be.compute_dtype();

  // Router logits in fp32: the top-k choice is the one place where bf16 rounding flips a discrete decision
  // (HF's bf16 path flips 2.6% of token-layer expert sets of the moe_tied golden vs fp32).
  k.logits = be.alloc({T, E}, DType::F32);
  be.gemm(x, false, w.router, true, k.logits, 1.f, 0.f);
  k.idx = be.alloc({T, K}, DType::I32);
  k.w = be.alloc({T, K}, DType::F32);
  be.moe_router_fwd(k.logits, static_cast<int>(K), k.idx, k.w);

  const Tensor idx_host = be.download(k.idx, DType::I32);
  std::vector<std::vector<int32_t>> rows(E), slots(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = idx_host.ptr<int32_t>()[t * K + j];
      check(e >= 0 && e < E, "internal: router picked expert " + std::to_string(e));
      rows[e].push_back(static_cast<int32_t>(t));
      slots[e].push_back(static_cast<int32_t>(t * K + j));
    }
  }

  Tensor out = be.zeros({T, H}, dt);
  Tensor w_flat = k.w.view({T * K, 1});
  for (int e = 0; e < E; ++e) {
    const int64_t n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    ExpertCache ec;
    ec.expert = e;
    ec.n = n;
    ec.rows = be.upload_i32(rows[e]);
    ec.slots = be.upload_i32(slots[e]);
    ec.xe = be.alloc({n, H}, dt);
    be.gather_rows(x, ec.rows, ec.xe);
    ec.gu = be.alloc({n, 2 * Ie}, dt);
    {
      LoraModule lv;
      if (l.ex_gate_up) lv = expert_lora_view(be, l.ex_gate_up, e, false);
      linear_fwd(be, ec.xe, w.experts_gate_up.index(e), l.ex_gate_up ? &lv : nullptr, c.rt, c.salt(16 + e % 32),
                 ec.gu, ec.lgu);
    }
    ec.g = be.alloc({n, Ie}, dt);
    ec.u = be.alloc({n, Ie}, dt);
    be.copy_cols(ec.g, 0, ec.gu, 0, Ie);
    be.copy_cols(ec.u, 0, ec.gu, Ie, Ie);
    ec.h = be.alloc({n, Ie}, dt);
    be.swiglu_fwd(ec.g, ec.u, ec.h);
    ec.ye = be.alloc({n, H}, dt);
    {
      LoraModule lv;
      if (l.ex_down) lv = expert_lora_view(be, l.ex_down, e, false);
      linear_fwd(be, ec.h, w.experts_down.index(e), l.ex_down ? &lv : nullptr, c.rt, c.salt(48 + e % 16), ec.ye,
                 ec.ld);
    }
    ec.we = be.alloc({n, 1}, DType::F32);
    be.gather_rows(w_flat, ec.slots, ec.we);
    be.scatter_add_rows(ec.ye, ec.rows, ec.we.view({n}), out);
    k.experts.push_back(std::move(ec));
  }

  k.shared_out = mlp_fwd(c, w.sh_gate, w.sh_up, w.sh_down, l.sh_gate, l.sh_up, l.sh_down, 10, x, k.shared);
  k.sg_logit = be.alloc({T, 1}, dt);
  be.gemm(x, false, w.sh_gate_w, true, k.sg_logit, 1.f, 0.f);
  k.sg = be.alloc({T}, DType::F32);
  be.sigmoid(k.sg_logit.view({T}), k.sg);
  Tensor scaled = be.alloc({T, H}, dt);
  be.scale_rows(k.shared_out, k.sg, scaled);
  be.add(out, scaled, 1.f);
  return out;
}

void moe_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                   const MoeCache& k, Tensor& dx) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = dout.rows(), H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k, Ie = cfg.moe_intermediate;
  const DType dt = be.compute_dtype();

  be.fill(dx, 0.f);
  Tensor dw = be.zeros({T * K, 1}, DType::F32);
  for (const ExpertCache& ec : k.experts) {
    const int64_t n = ec.n;
    const int e = ec.expert;
    Tensor dout_rows = be.alloc({n, H}, dt);
    be.gather_rows(dout, ec.rows, dout_rows);
    Tensor dwe = be.alloc({n}, DType::F32);
    be.row_dot(dout_rows, ec.ye, dwe);
    be.scatter_add_rows(dwe.view({n, 1}), ec.slots, Tensor{}, dw);
    Tensor dye = be.alloc({n, H}, dt);
    be.scale_rows(dout_rows, ec.we.view({n}), dye);

    Tensor dh = be.alloc({n, Ie}, dt);
    if (l.ex_down) {
      LoraModule lv = expert_lora_view(be, l.ex_down, e, true);
      linear_bwd(be, dye, w.experts_down.index(e), &lv, c.rt, c.salt(48 + e % 16), ec.ld, dh, false);
      expert_lora_store_grad(be, l.ex_down, e, lv);
    } else {
      linear_bwd(be, dye, w.experts_down.index(e), nullptr, c.rt, 0, ec.ld, dh, false);
    }
    Tensor dg = be.alloc({n, Ie}, dt), du = be.alloc({n, Ie}, dt);
    be.swiglu_bwd(dh, ec.g, ec.u, dg, du);
    Tensor dgu = be.alloc({n, 2 * Ie}, dt);
    be.copy_cols(dgu, 0, dg, 0, Ie);
    be.copy_cols(dgu, Ie, du, 0, Ie);
    Tensor dxe = be.alloc({n, H}, dt);
    if (l.ex_gate_up) {
      LoraModule lv = expert_lora_view(be, l.ex_gate_up, e, true);
      linear_bwd(be, dgu, w.experts_gate_up.index(e), &lv, c.rt, c.salt(16 + e % 32), ec.lgu, dxe, false);
      expert_lora_store_grad(be, l.ex_gate_up, e, lv);
    } else {
      linear_bwd(be, dgu, w.experts_gate_up.index(e), nullptr, c.rt, 0, ec.lgu, dxe, false);
    }
    be.scatter_add_rows(dxe, ec.rows, Tensor{}, dx);
  }
  Tensor dlogits = be.alloc({T, E}, DType::F32);
  be.moe_router_bwd(dw.view({T, K}), k.idx, k.w, dlogits);
  be.gemm(dlogits, false, w.router, false, dx, 1.f, 1.f);

  // shared expert: out = σ(s)·mlp(x), s = x·w_sgᵀ
  Tensor dshared = be.alloc({T, H}, dt);
  be.scale_rows(dout, k.sg, dshared);
  mlp_bwd(c, w.sh_gate, w.sh_up, w.sh_down, l.sh_gate, l.sh_up, l.sh_down, 10, dshared, k.shared, dx, true);
  Tensor dsig = be.alloc({T}, DType::F32);
  be.row_dot(dout, k.shared_out, dsig);
  Tensor ones = be.alloc({T}, DType::F32);
  be.fill(ones, 1.f);
  Tensor unused = be.alloc({T}, DType::F32), dsg = be.alloc({T, 1}, dt);
  Tensor dsg1 = dsg.view({T});
  be.sigmoid_mul_bwd(dsig, ones, k.sg_logit.view({T}), unused, dsg1);
  be.gemm(dsg, false, w.sh_gate_w, false, dx, 1.f, 1.f);
}

}  // namespace deltatune
