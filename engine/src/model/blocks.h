// Decoder blocks of Qwen3.5 (spec §3): each has a forward that fills a cache and a backward that reads it.
// Private to engine/src/model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/token_exchange.h"
#include "lora/lora.h"
#include "io/model_config.h"
#include "model/lora_linear.h"

namespace deltatune {

// Frozen weights of one layer on the backend (matrices in the weight dtype, vectors F32).
struct DeviceLayerWeights {
  LayerKind kind = LayerKind::LinearAttention;
  Tensor input_norm, post_norm;
  BaseMatrix q_proj, k_proj, v_proj, o_proj;                                              // attention
  Tensor q_norm, k_norm;
  BaseMatrix in_qkv, in_z, in_b, in_a, out_proj;                                          // Gated DeltaNet
  Tensor conv, dt_bias, A_log, lin_norm;
  BaseMatrix gate_proj, up_proj, down_proj;                                               // dense MLP
  Tensor router, sh_gate_w;                                                               // MoE
  BaseMatrix experts_gate_up, experts_down;  // [E, out, in]; quantized as the stacked matrix [E*out, in]
  BaseMatrix sh_gate, sh_up, sh_down;
};

// fn(Tensor&) on every device tensor of `w` in a fixed order (a quantized matrix: its parts, on a copy of its
// QuantizedWeight that then replaces it). Sharded layers (sharded_layers.cpp) pack and rebind them through it:
// a field added to DeviceLayerWeights must be visited here.
template <class Fn>
void for_each_weight_tensor(DeviceLayerWeights& w, Fn fn) {
  auto mat = [&](BaseMatrix& m) {
    if (!m.q) {
      fn(m.w);
      return;
    }
    auto q = std::make_shared<QuantizedWeight>(*m.q);
    for (Tensor* t : {&q->values, &q->scales, &q->absmax2, &q->code2}) fn(*t);
    m.q = std::move(q);
  };
  for (Tensor* t : {&w.input_norm, &w.post_norm, &w.q_norm, &w.k_norm, &w.conv, &w.dt_bias, &w.A_log, &w.lin_norm,
                    &w.router, &w.sh_gate_w})
    fn(*t);
  for (BaseMatrix* m : {&w.q_proj, &w.k_proj, &w.v_proj, &w.o_proj, &w.in_qkv, &w.in_z, &w.in_b, &w.in_a,
                        &w.out_proj, &w.gate_proj, &w.up_proj, &w.down_proj, &w.experts_gate_up, &w.experts_down,
                        &w.sh_gate, &w.sh_up, &w.sh_down})
    mat(*m);
}

// LoRA modules attached to one layer (null = not adapted).
struct LayerLora {
  LoraModule *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  LoraModule *qkv = nullptr, *z = nullptr, *b = nullptr, *a = nullptr, *out = nullptr;
  LoraModule *gate = nullptr, *up = nullptr, *down = nullptr;
  LoraModule *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr;
  LoraModule *ex_gate_up = nullptr, *ex_down = nullptr;
};
LayerLora layer_lora_find(LoraAdapter* adapter, int layer);

struct BlockContext {
  Backend& be;
  const ModelConfig& cfg;
  const SeqLayout& seq;
  const LoraRuntime& rt;
  int layer = 0;
  // This forward is the recompute right before the layer's backward (gradient checkpointing): ops may keep
  // per-call state for the backward instead of recomputing it there, and the layer's output (the next layer's
  // input, kept) is not formed.
  bool keep_for_backward = false;
  // This forward's activations are kept for a backward after the rest of the forward (a layer not
  // checkpointed): ops may keep what is cheap in memory and saves work in that backward.
  bool activations_kept = false;
  // This forward's GDN core keeps everything its backward reads (GdnKeep::All) for a checkpointed layer's
  // recompute to reuse (RecomputeKeep::gdn_core): the first forward of such a layer.
  bool keep_gdn_core = false;
  // This forward's MLP gate/up outputs (g, u) are kept for a checkpointed layer's recompute to reuse
  // (RecomputeKeep::mlp): the first forward of such a layer.
  bool keep_mlp_gu = false;
  Tensor* moe_load = nullptr;  // F32 [E] (+=) tokens per expert of this layer (router statistics), or null
  // Expert parallel (model/expert_parallel.h): the layer's weights and LoRA hold this rank's experts only and
  // the routed rows travel through `ep`; null = every expert here.
  TokenExchange* ep = nullptr;
  uint64_t salt(int module) const { return static_cast<uint64_t>(layer) * 64 + static_cast<uint64_t>(module); }
};

// Selective recompute (RecomputeKeep): a recompute (keep_for_backward) whose cache already holds what the layer's
// first forward kept skips forming it — AttnCache o and lse: the attention forward; GdnCache o (and core): the
// delta-rule forward; MlpCache g and u: the gate and up base GEMMs.
struct AttnCache {
  LinearGroupCache lqkv;  // q, k, v
  LinearCache lo;
  Tensor qg;  // q_proj's output as [T·nH, 2·hd] rows of q | gate (each head's pair), read in place
  Tensor k, v, rstd_q, rstd_k, qn, kn, o, lse, og;
};
// The block forwards return their output, plus `residual` when given (the residual stream: read by the output
// projection's rank-r term and accumulated in its GEMM epilogue, no copy of it).
Tensor attention_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                           const Tensor& x, AttnCache& cache, const Tensor* residual = nullptr);
// dx (=) gradient w.r.t. the block input.
void attention_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                         const Tensor& dout, const AttnCache& cache, Tensor& dx);

struct GdnCache {
  LinearGroupCache lin;  // in_proj qkv, z, b, a
  LinearCache lout;
  Tensor p, z, bl, al, q, k, v, o, y, rstd;
  std::shared_ptr<Backend::GdnSaved> core;  // what gdn_fwd_keep kept (keep_for_backward), else null
};
Tensor gdn_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                     GdnCache& cache, const Tensor* residual = nullptr);
void gdn_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                   const GdnCache& cache, Tensor& dx);

struct MlpCache {
  LinearGroupCache lgu;  // gate, up
  LinearCache ld;
  Tensor g, u, h;
  // g and u hold the gate/up outputs with their LoRA rank-r terms; false: the base products alone, the backward
  // passes the terms (lgu's u, the B factors) to lora_swiglu_bwd.
  bool gu_sums = true;
};
// SwiGLU MLP with explicit weights (dense MLP and the MoE shared expert).
Tensor mlp_fwd(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, const BaseMatrix& down_w,
               LoraModule* lg, LoraModule* lu, LoraModule* ld, int salt0, const Tensor& x, MlpCache& cache,
               const Tensor* residual = nullptr);
// What mlp_bwd reads of mlp_fwd, without the output (a checkpointed layer's recompute: the down projection's
// base product, [T, I] x [I, H], and its rank-r term are skipped; with g and u already in `cache`, kept by the
// first forward, the gate and up base products too).
void mlp_fwd_cache(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, LoraModule* lg,
                   LoraModule* lu, LoraModule* ld, int salt0, const Tensor& x, MlpCache& cache);
void mlp_bwd(const BlockContext& c, const BaseMatrix& gate_w, const BaseMatrix& up_w, const BaseMatrix& down_w,
             LoraModule* lg, LoraModule* lu, LoraModule* ld, int salt0, const Tensor& dout, const MlpCache& cache,
             Tensor& dx, bool accumulate);

// One expert parameter (W [E, out, in]) with its optional LoRA, applied to rows grouped by expert.
struct GroupedLinearCache {
  Tensor xd;  // dropout(x) when dropout > 0
  Tensor u;   // xd·A_eᵀ per row [M, r] (F32)
};
// y (=) x·W_eᵀ (+ s·(drop(x)·A_eᵀ)·B_eᵀ) for the rows [off[e], off[e+1]) of each expert e; W [E, out, in]
// (moe_block.cpp).
void grouped_linear_fwd(Backend& be, const Tensor& x, const Tensor& w, LoraModule* m, const LoraRuntime& rt,
                        uint64_t salt, const Tensor& off, Tensor& y, GroupedLinearCache& c);
// dx (=) dy·W_e (+ LoRA path); LoRA gradients (+=) into m->gA / m->gB. x: the forward input.
void grouped_linear_bwd(Backend& be, const Tensor& dy, const Tensor& w, LoraModule* m, const LoraRuntime& rt,
                        uint64_t salt, const Tensor& off, const Tensor& x, const GroupedLinearCache& c, Tensor& dx);
// The experts' weights [E, out, in] as a plain tensor: as held, or (quantized base) dequantized into a scratch
// that lives as long as the returned tensor.
Tensor expert_weights(Backend& be, const BaseMatrix& w, int64_t E, int64_t out, int64_t in);

// Expert parallel: where this rank's rows went and what its experts received (model/expert_parallel.h).
struct ExpertParallelCache {
  bool planned = false;                       // the fields below up to local_off hold this layer's plan
  std::vector<int64_t> send_rows, recv_rows;  // per peer rank: dispatch rows sent there / received from it
  Tensor to_local, to_source;                 // I32 maps received (source-major) <-> expert-major rows
  Tensor local_off;                           // I32 [E/N + 1]: the local experts' row ranges (expert-major)
  Tensor recv;                                // rows in flight to this rank (source-major), until received
  Tensor xl;                                  // received rows, expert-major [R, H]
};
struct MoeCache {
  // routed: idx, w, the dispatch and (expert parallel) the exchange plan are already here (kept from the first
  // forward for a checkpointed layer's recompute: moe_routing_kept): the forward neither routes again nor
  // waits for the exchange sizes.
  bool routed = false;
  Tensor logits, idx, w;
  // Dispatch (backend.h moe_dispatch): M = T·K rows sorted by (expert, slot).
  Tensor offsets, row_token, row_slot, slot_row;
  Tensor xe, gu, h, ye;  // permuted input [M,H], packed [gate | up] [M,2Ie] and act [M,Ie] (expert parallel:
                         // [R,.] of the received rows), expert output [M,H]
  GroupedLinearCache lgu, ld;
  ExpertParallelCache ep;
  MlpCache shared;
  Tensor shared_out, sg_logit, sg;  // shared expert output [T,H], gate logit [T,1], σ(gate) [T]
};
Tensor moe_block_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                     MoeCache& cache);
// What a checkpointed expert-parallel layer keeps from its first forward for the recompute (router choice,
// dispatch, exchange plan: ~(3·T·K + R) int32): the recompute then needs no host wait and routes identically.
MoeCache moe_routing_kept(const MoeCache& first);
void moe_block_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dout,
                   const MoeCache& cache, Tensor& dx);

}  // namespace deltatune
