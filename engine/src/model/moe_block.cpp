// Sparse MoE block (spec §3.8): softmax router, top-k renormalised weights, per-expert SwiGLU on the
// tokens routed to it, plus a shared expert scaled by σ(x·w_sgᵀ).
//
// Everything stays on the device, with no host sync on expert counts: moe_dispatch sorts the T·K routing
// slots by expert (offsets, row maps), the token rows are gathered once into that order, both expert
// projections run as grouped GEMMs over the experts' row ranges, SwiGLU runs over all rows at once, and
// moe_combine sums each token's K expert outputs in a fixed order (deterministic, no atomics).
// Expert LoRA: A [r·E, in] (PEFT's layout, peft-adapter.md §6.2) is [E, r, in] as it is; B, its gradient and its
// moments are [E, out, r] on the backend (lora/lora_b_layout.h: regrouped from PEFT's [out, r·E] only at upload
// and download), read and accumulated here as they are. LoRA dropout (if any) masks the permuted input rows of each projection: every
// routed (token, expert) row gets its own mask, the same in forward and backward.
#include "core/error.h"
#include "model/blocks.h"
#include "model/expert_parallel.h"

namespace deltatune {

Tensor expert_weights(Backend& be, const BaseMatrix& w, int64_t E, int64_t out, int64_t in) {
  return w.q ? plain_weight(be, w).view({E, out, in}) : w.w;
}

namespace {

void check_expert_b(const LoraModule& m, const Tensor& t, const char* what) {
  check(t.shape == Shape({m.experts, m.out, m.r}),
        "internal: expert LoRA " + m.path + " " + what + " is " + shape_str(t.shape) + " on the backend, expected [" +
            std::to_string(m.experts) + ", " + std::to_string(m.out) + ", " + std::to_string(m.r) +
            "] (lora_to_backend's layout)");
}

const Tensor& expert_b(const LoraModule& m) {
  check_expert_b(m, m.B, "B");
  return m.B;
}

Tensor& expert_b_grad(LoraModule& m) {
  check_expert_b(m, m.gB, "gB");
  return m.gB;
}

}  // namespace

void grouped_linear_fwd(Backend& be, const Tensor& x, const Tensor& w, LoraModule* m, const LoraRuntime& rt,
                        uint64_t salt, const Tensor& off, Tensor& y, GroupedLinearCache& c) {
  if (!m) {
    be.grouped_gemm(x, w, true, off, y, 1.f, 0.f);
    return;
  }
  const int64_t E = m->experts, r = m->r;
  check(E == w.dim(0) && m->in == w.dim(2) && m->out == w.dim(1),
        "internal: expert LoRA " + m->path + " does not match its weight " + shape_str(w.shape));
  Tensor xin = x;
  const bool dropped = rt.training && rt.dropout > 0.f;
  if (dropped) {
    c.xd = be.alloc(x.shape, x.dtype);
    be.dropout(x, rt.dropout, lora_module_seed(rt, salt), c.xd);
    xin = c.xd;
  }
  c.u = be.alloc({x.rows(), r}, DType::F32);
  const Tensor& B = expert_b(*m);
  if (!dropped) {  // u = x·A_eᵀ and y = x·W_eᵀ + s·u·B_eᵀ, one read of x where the backend fuses them
    be.grouped_lora_linear_fwd(x, w, m->A.view({E, r, m->in}), off, B, m->scaling, c.u, y);
    return;
  }
  be.grouped_gemm(xin, m->A.view({E, r, m->in}), true, off, c.u, 1.f, 0.f);
  be.grouped_gemm_lora(x, w, true, off, c.u, B, m->scaling, y, 1.f, 0.f);  // y = x·W_eᵀ + s·u·B_eᵀ
}

void grouped_linear_bwd(Backend& be, const Tensor& dy, const Tensor& w, LoraModule* m, const LoraRuntime& rt,
                        uint64_t salt, const Tensor& off, const Tensor& x, const GroupedLinearCache& c, Tensor& dx) {
  if (!m) {
    be.grouped_gemm(dy, w, false, off, dx, 1.f, 0.f);
    return;
  }
  const int64_t E = m->experts, r = m->r;
  const bool dropped = rt.training && rt.dropout > 0.f;
  const Tensor& xin = dropped ? c.xd : x;
  // gB_e += s·dy_eᵀ·u_e ([E, out, r] on the backend)
  Tensor& gB = expert_b_grad(*m);
  be.grouped_gemm_wgrad(dy, c.u, off, gB, m->scaling, 1.f);
  // du = s·dy·B_e ; gA_e += du_eᵀ·xin_e ; dx = dy·W_e + dropout(du·A_e)
  Tensor du = be.alloc({dy.rows(), r}, DType::F32);
  be.grouped_gemm(dy, expert_b(*m), false, off, du, m->scaling, 0.f);
  Tensor gA = m->gA.view({E, r, m->in});
  be.grouped_gemm_wgrad(du, xin, off, gA, 1.f, 1.f);
  const Tensor A = m->A.view({E, r, m->in});
  if (!dropped) {
    be.grouped_gemm_lora(dy, w, false, off, du, A, 1.f, dx, 1.f, 0.f);
    return;
  }
  be.grouped_gemm(dy, w, false, off, dx, 1.f, 0.f);
  Tensor dxd = be.alloc(dx.shape, dx.dtype);
  be.grouped_gemm(du, A, false, off, dxd, 1.f, 0.f);
  Tensor masked = be.alloc(dx.shape, dx.dtype);
  be.dropout(dxd, rt.dropout, lora_module_seed(rt, salt), masked);
  be.add(dx, masked, 1.f);
}

MoeCache moe_routing_kept(const MoeCache& first) {
  MoeCache k;
  k.routed = true;
  k.idx = first.idx;
  k.w = first.w;
  k.offsets = first.offsets;
  k.row_token = first.row_token;
  k.row_slot = first.row_slot;
  k.slot_row = first.slot_row;
  k.ep.planned = first.ep.planned;
  k.ep.send_rows = first.ep.send_rows;
  k.ep.recv_rows = first.ep.recv_rows;
  k.ep.to_local = first.ep.to_local;
  k.ep.to_source = first.ep.to_source;
  k.ep.local_off = first.ep.local_off;
  return k;
}

namespace {

// σ(x·w_sgᵀ)·mlp(x) [T, H] (fills the shared expert's part of k).
Tensor shared_expert_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                         MoeCache& k) {
  Backend& be = c.be;
  const int64_t T = x.rows(), H = c.cfg.hidden_size;
  k.shared_out = mlp_fwd(c, w.sh_gate, w.sh_up, w.sh_down, l.sh_gate, l.sh_up, l.sh_down, 10, x, k.shared);
  k.sg_logit = be.alloc({T, 1}, be.compute_dtype());
  be.gemm(x, false, w.sh_gate_w, true, k.sg_logit, 1.f, 0.f);
  k.sg = be.alloc({T}, DType::F32);
  be.sigmoid(k.sg_logit.view({T}), k.sg);
  Tensor scaled = be.alloc({T, H}, be.compute_dtype());
  be.scale_rows(k.shared_out, k.sg, scaled);
  return scaled;
}

}  // namespace

Tensor moe_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                     MoeCache& k) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k, Ie = cfg.moe_intermediate;
  const int64_t M = T * K;
  const DType dt = be.compute_dtype();

  if (!k.routed) {
    // Router logits in fp32: the top-k choice is the one place where bf16 rounding flips a discrete decision
    // (HF's bf16 path flips 2.6% of token-layer expert sets of the moe_tied golden vs fp32).
    k.logits = be.alloc({T, E}, DType::F32);
    be.gemm(x, false, w.router, true, k.logits, 1.f, 0.f);
    k.idx = be.alloc({T, K}, DType::I32);
    k.w = be.alloc({T, K}, DType::F32);
    be.moe_router_fwd(k.logits, static_cast<int>(K), k.idx, k.w);

    k.offsets = be.alloc({E + 1}, DType::I32);
    k.row_token = be.alloc({M}, DType::I32);
    k.row_slot = be.alloc({M}, DType::I32);
    k.slot_row = be.alloc({M}, DType::I32);
    be.moe_dispatch(k.idx, static_cast<int>(E), k.offsets, k.row_token, k.row_slot, k.slot_row, c.moe_load);
  }

  k.xe = be.alloc({M, H}, dt);
  be.gather_rows(x, k.row_token, k.xe);
  Tensor shared;  // expert parallel: computed while the exchange is in flight, added at the end as without
  if (c.ep) {
    expert_parallel_route(c, k);  // first forward: the offsets gather runs beside the shared expert
    if (k.ep.planned) expert_parallel_send(c, k);  // recompute: the rows travel beside the shared expert
    if (cfg.has_shared_expert()) shared = shared_expert_fwd(c, w, l, x, k);
    if (!k.ep.planned) expert_parallel_send(c, k);
    k.ye = expert_parallel_rows_fwd(c, w, l, k);
  } else {
    k.gu = be.alloc({M, 2 * Ie}, dt);  // [gate | up] as the GEMM writes it, kept for the backward
    grouped_linear_fwd(be, k.xe, expert_weights(be, w.experts_gate_up, E, 2 * Ie, H), l.ex_gate_up, c.rt,
                       c.salt(16), k.offsets, k.gu, k.lgu);
    k.h = be.alloc({M, Ie}, dt);
    be.swiglu_packed_fwd(k.gu, k.h);
    k.ye = be.alloc({M, H}, dt);
    grouped_linear_fwd(be, k.h, expert_weights(be, w.experts_down, E, H, Ie), l.ex_down, c.rt, c.salt(48),
                       k.offsets, k.ye, k.ld);
  }
  Tensor out = be.alloc({T, H}, dt);
  be.moe_combine(k.ye, k.slot_row, k.w, out);
  if (!cfg.has_shared_expert()) return out;  // zero-width shared expert: σ(s)·0
  if (!shared.defined()) shared = shared_expert_fwd(c, w, l, x, k);
  be.add(out, shared, 1.f);
  return out;
}

namespace {

// dx (+= when accumulate, else =) the router's part: dlogits from dw [T·K] (gradient of the top-k weights).
void router_bwd(const BlockContext& c, const DeviceLayerWeights& w, const Tensor& dw, const MoeCache& k, Tensor& dx,
                bool accumulate) {
  Backend& be = c.be;
  const int64_t T = k.idx.dim(0), K = k.idx.dim(1);
  Tensor dlogits = be.alloc({T, c.cfg.num_experts}, DType::F32);
  be.moe_router_bwd(dw.view({T, K}), k.idx, k.w, dlogits);
  be.gemm(dlogits, false, w.router, false, dx, 1.f, accumulate ? 1.f : 0.f);
}

// dx (+=) the shared expert's part: out = σ(s)·mlp(x), s = x·w_sgᵀ.
void shared_expert_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                       const MoeCache& k, Tensor& dx) {
  if (!c.cfg.has_shared_expert()) return;
  Backend& be = c.be;
  const int64_t T = dout.rows(), H = c.cfg.hidden_size;
  const DType dt = be.compute_dtype();
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

}  // namespace

void moe_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                   const MoeCache& k, Tensor& dx) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = dout.rows(), H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k, Ie = cfg.moe_intermediate;
  const DType dt = be.compute_dtype();

  const int64_t M = T * K;
  // Combine backward: dye[i] = w[slot(i)]·dout[token(i)]; dw[slot(i)] = <dout[token(i)], ye[i]>.
  Tensor dout_rows = be.alloc({M, H}, dt);
  be.gather_rows(dout, k.row_token, dout_rows);
  Tensor dw_rows = be.alloc({M, 1}, DType::F32);
  Tensor dw_rows1 = dw_rows.view({M});
  be.row_dot(dout_rows, k.ye, dw_rows1);
  Tensor dw = be.alloc({M, 1}, DType::F32);
  be.gather_rows(dw_rows, k.slot_row, dw);
  Tensor we = be.alloc({M, 1}, DType::F32);
  be.gather_rows(k.w.view({M, 1}), k.row_slot, we);
  Tensor dye = be.alloc({M, H}, dt);
  be.scale_rows(dout_rows, we.view({M}), dye);
  dout_rows = Tensor{};

  if (c.ep) {
    // dx gets its three parts in the order of the one-GPU path below (the same fp32 roundings): the router and
    // shared expert gradients do not run beside the exchange.
    ExpertParallelGradFlight flight = expert_parallel_send_grad(c, dye, k);
    dye = Tensor{};
    const Tensor dxe = expert_parallel_rows_bwd(c, w, l, std::move(flight), k);
    be.moe_combine(dxe, k.slot_row, Tensor{}, dx);
    router_bwd(c, w, dw, k, dx, true);
    shared_expert_bwd(c, w, l, dout, k, dx);
    return;
  }
  Tensor dh = be.alloc({M, Ie}, dt);
  grouped_linear_bwd(be, dye, expert_weights(be, w.experts_down, E, H, Ie), l.ex_down, c.rt, c.salt(48),
                     k.offsets, k.h, k.ld, dh);
  Tensor dgu = be.alloc({M, 2 * Ie}, dt);
  be.swiglu_packed_bwd(dh, k.gu, dgu);
  dh = Tensor{};
  Tensor dxe = be.alloc({M, H}, dt);
  grouped_linear_bwd(be, dgu, expert_weights(be, w.experts_gate_up, E, 2 * Ie, H), l.ex_gate_up, c.rt,
                     c.salt(16), k.offsets, k.xe, k.lgu, dxe);
  be.moe_combine(dxe, k.slot_row, Tensor{}, dx);
  router_bwd(c, w, dw, k, dx, true);
  shared_expert_bwd(c, w, l, dout, k, dx);
}

}  // namespace deltatune
