#include "model/qwen35_model.h"

#include <algorithm>
#include <array>
#include <span>
#include <string>

#include "core/error.h"
#include "backend/activation_stash.h"
#include "backend/lora_kcat_ops.h"
#include "backend/quant_ops.h"
#include "model/blocks.h"
#include "model/sharded_layers.h"
#include "model/step_record.h"
#include "quant/quantize_host.h"
#include "model/vision_encoder.h"
#include "vision/image_embeds.h"

namespace deltatune {

struct Qwen35Model::DeviceLayer : DeviceLayerWeights {};

struct LayerCache {
  Tensor x_in;            // layer input (kept with gradient checkpointing)
  Tensor a, rstd1, x_mid, m, rstd2;
  AttnCache attn;
  GdnCache gdn;
  MlpCache mlp;
  MoeCache moe;
};

struct Qwen35Model::Activations {
  std::vector<LayerCache> layers;
  Tensor x_final, rstd_final;
  // A batch with images whose adapter has vision modules: the tower's activations and the image-token rows.
  VisionEncoder::Saved vision;
  std::vector<int32_t> image_rows;
  bool vision_kept = false;
};

LayerLora layer_lora_find(LoraAdapter* adapter, int layer) {
  LayerLora l;
  if (!adapter) return l;
  const std::string p = "layers." + std::to_string(layer) + ".";
  auto f = [&](const char* s) { return adapter->find(p + s); };
  l.q = f("self_attn.q_proj");
  l.k = f("self_attn.k_proj");
  l.v = f("self_attn.v_proj");
  l.o = f("self_attn.o_proj");
  l.qkv = f("linear_attn.in_proj_qkv");
  l.z = f("linear_attn.in_proj_z");
  l.b = f("linear_attn.in_proj_b");
  l.a = f("linear_attn.in_proj_a");
  l.out = f("linear_attn.out_proj");
  l.gate = f("mlp.gate_proj");
  l.up = f("mlp.up_proj");
  l.down = f("mlp.down_proj");
  l.sh_gate = f("mlp.shared_expert.gate_proj");
  l.sh_up = f("mlp.shared_expert.up_proj");
  l.sh_down = f("mlp.shared_expert.down_proj");
  l.ex_gate_up = f("mlp.experts.gate_up_proj");
  l.ex_down = f("mlp.experts.down_proj");
  return l;
}

namespace {

Tensor up_w(Backend& be, const Tensor& t) { return t.defined() ? be.upload(t, be.weight_dtype()) : Tensor{}; }
Tensor up_f32(Backend& be, const Tensor& t) { return t.defined() ? be.upload(t, DType::F32) : Tensor{}; }
// A dense linear matrix (module `name`): quantized (an FP8 checkpoint's as stored, or now in `fmt`) or in the
// weight dtype.
BaseMatrix up_linear(Backend& be, const ModelWeights& mw, const std::string& name, const Tensor& t) {
  if (!t.defined()) return BaseMatrix{};
  const auto fp8 = mw.fp8_scale_inv.find(name);
  if (fp8 != mw.fp8_scale_inv.end()) return BaseMatrix(quant_ops(be).upload_quantized(fp8_weight_host(t, fp8->second)));
  if (mw.base_quant == QuantFormat::None) return be.upload(t, be.weight_dtype());
  return BaseMatrix(quant_ops(be).upload_quantized(t, mw.base_quant));
}
// The stacked experts [E, out, in] of one layer: quantized as the matrix [E*out, in] (an FP8 checkpoint's experts
// arrive dequantized to bf16; per-expert row counts are multiples of 128, so requantizing gives back the stored
// fp8 codes, with scales within one bf16 rounding), or in the weight dtype.
BaseMatrix up_experts(Backend& be, const ModelWeights& mw, const Tensor& t) {
  if (!t.defined() || mw.base_quant == QuantFormat::None) return up_w(be, t);
  return BaseMatrix(quant_ops(be).upload_quantized(t.view({t.dim(0) * t.dim(1), t.dim(2)}), mw.base_quant));
}


// The modules that read a layer's mixer input, as gdn_block_fwd / attention_block_fwd list them (salts aside):
// what the K-concatenated LoRA products (lora_linear.h) pad and write tails for. Returns how many.
template <class W, class M>
size_t mixer_inputs(W& w, const LayerLora& l, std::array<M*, 4>& ws, std::array<LoraModule*, 4>& ls) {
  if (w.kind == LayerKind::FullAttention) {
    ws = {&w.q_proj, &w.k_proj, &w.v_proj, nullptr};
    ls = {l.q, l.k, l.v, nullptr};
    return 3;
  }
  ws = {&w.in_qkv, &w.in_z, &w.in_b, &w.in_a};
  ls = {l.qkv, l.z, l.b, l.a};
  return 4;
}
std::vector<SharedInputModule> mixer_group(const DeviceLayerWeights& w, const LayerLora& l) {
  std::array<const BaseMatrix*, 4> ws{};
  std::array<LoraModule*, 4> ls{};
  const size_t n = mixer_inputs(w, l, ws, ls);
  std::vector<SharedInputModule> ms;
  for (size_t i = 0; i < n; ++i) ms.push_back({ws[i], ls[i], 0});
  return ms;
}

// Layer forward: x -> x + mixer(norm(x)) -> + mlp(norm(.)). Fills `c`. A recompute (keep_for_backward) of a
// dense layer returns no output: its down projection's product is skipped (the next layer's input was kept).
Tensor layer_fwd(const BlockContext& ctx, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                 LayerCache& c) {
  Backend& be = ctx.be;
  const auto& cfg = ctx.cfg;
  const int64_t T = x.rows(), H = cfg.hidden_size;
  const DType dt = be.compute_dtype();
  const float eps = static_cast<float>(cfg.rms_eps);
  c.x_in = x;
  // The mixer's input rows padded by the u columns where its LoRA products are K-concatenated (lora_linear.h).
  const int64_t kcat = kcat_cols(be, mixer_group(w, l), ctx.rt);
  c.a = be.alloc({T, H + kcat}, dt);
  c.rstd1 = be.alloc({T}, DType::F32);
  if (kcat) lora_kcat_ops(be)->rmsnorm_fwd_into(x, w.input_norm, eps, true, Backend::Cols(c.a, 0, H), c.rstd1);
  else be.rmsnorm_fwd(x, w.input_norm, eps, true, c.a, c.rstd1);
  // The residual adds happen in the output projections (x_mid = x + the mixer: the rank-r term reads x, the base
  // GEMM accumulates in its epilogue).
  c.x_mid = w.kind == LayerKind::FullAttention ? attention_block_fwd(ctx, w, l, c.a, c.attn, &x)
                                                : gdn_block_fwd(ctx, w, l, c.a, c.gdn, &x);
  c.m = be.alloc({T, H}, dt);
  c.rstd2 = be.alloc({T}, DType::F32);
  be.rmsnorm_fwd(c.x_mid, w.post_norm, eps, true, c.m, c.rstd2);
  if (ctx.keep_for_backward && !cfg.is_moe()) {  // a recompute: the backward reads the caches, not the output
    mlp_fwd_cache(ctx, w.gate_proj, w.up_proj, l.gate, l.up, l.down, 9, c.m, c.mlp);
    return Tensor();
  }
  if (!cfg.is_moe())
    return mlp_fwd(ctx, w.gate_proj, w.up_proj, w.down_proj, l.gate, l.up, l.down, 9, c.m, c.mlp, &c.x_mid);
  Tensor out = be.alloc({T, H}, dt);
  be.copy(out, c.x_mid);
  be.add(out, moe_block_fwd(ctx, w, l, c.m, c.moe), 1.f);
  return out;
}

// Selective recompute: what a checkpointed layer's first forward (`first`) leaves for its recompute (`kept`)
// under StepOptions::keep. The recompute skips forming what it finds there (blocks.h).
void keep_for_recompute(const RecomputeKeep& keep, int64_t layer, bool moe, const LayerCache& first,
                        LayerCache& kept) {
  if (keep.attn_core) {
    kept.attn.o = first.attn.o;
    kept.attn.lse = first.attn.lse;
  }
  if (keep.gdn_core) {
    kept.gdn.o = first.gdn.o;
    kept.gdn.core = first.gdn.core;
  }
  if (keep.mlp(layer) && !moe) {
    kept.mlp.g = first.mlp.g;
    kept.mlp.u = first.mlp.u;
  }
}

// The cache a checkpointed layer's recompute starts from: what keep_for_recompute kept (moved out of `c`).
LayerCache recompute_start(LayerCache& c) {
  LayerCache r;
  r.attn.o = std::move(c.attn.o);
  r.attn.lse = std::move(c.attn.lse);
  r.gdn.o = std::move(c.gdn.o);
  r.gdn.core = std::move(c.gdn.core);
  r.mlp.g = std::move(c.mlp.g);
  r.mlp.u = std::move(c.mlp.u);
  return r;
}

// dx_out: gradient w.r.t. the layer output; returns the gradient w.r.t. its input.
Tensor layer_bwd(const BlockContext& ctx, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& dx_out,
                 const LayerCache& c) {
  Backend& be = ctx.be;
  const auto& cfg = ctx.cfg;
  const int64_t T = dx_out.rows(), H = cfg.hidden_size;
  const DType dt = be.compute_dtype();
  Tensor dm = be.alloc({T, H}, dt);
  if (cfg.is_moe()) moe_block_bwd(ctx, w, l, dx_out, c.moe, dm);
  else mlp_bwd(ctx, w.gate_proj, w.up_proj, w.down_proj, l.gate, l.up, l.down, 9, dx_out, c.mlp, dm, false);
  Tensor dmid = be.alloc({T, H}, dt);
  be.rmsnorm_bwd_add(dm, c.x_mid, w.post_norm, c.rstd2, true, dx_out, dmid);

  Tensor da = be.alloc({T, H}, dt);
  if (w.kind == LayerKind::FullAttention) attention_block_bwd(ctx, w, l, dmid, c.attn, da);
  else gdn_block_bwd(ctx, w, l, dmid, c.gdn, da);
  Tensor dx = be.alloc({T, H}, dt);
  be.rmsnorm_bwd_add(da, c.x_in, w.input_norm, c.rstd1, true, dmid, dx);
  return dx;
}

}  // namespace

Qwen35Model::Qwen35Model(const ModelWeights& mw, Backend& be, ShardGatherer* shard, TokenExchange* ep)
    : cfg_(mw.config), be_(be), ep_(ep) {
  if (shard) sharded_ = std::make_unique<ShardedLayers>(be, *shard);
  // Expert parallel: this rank's experts [first, first + per) of every MoE layer.
  int64_t first = 0, per = cfg_.num_experts;
  if (ep_ && cfg_.is_moe()) {
    check(cfg_.num_experts % ep_->world() == 0, "expert parallel: the model's " + std::to_string(cfg_.num_experts) +
                                                    " experts do not divide over " + std::to_string(ep_->world()) +
                                                    " GPUs");
    per = cfg_.num_experts / ep_->world();
    first = ep_->rank() * per;
  }
  auto mine = [&](const Tensor& t) { return t.defined() && per != cfg_.num_experts ? t.slice(first, first + per) : t; };
  std::string prefix;  // "layers.N."
  auto up_l = [&](const char* module, const Tensor& t) { return up_linear(be, mw, prefix + module, t); };
  // An untied table is only read row by row (never in a GEMM, no gradient): it stays in host memory,
  // page-locked and mapped on CUDA, so the gather reads its T rows over the bus (T*H*2 bytes a step, ~1 ms at
  // 4096 x 4096) and the device keeps V*H*2 bytes free (1.9 GiB at 9B, 2.4 GiB at 27B). A tied table is the
  // lm_head too and stays on the device.
  embed_ = mw.tied ? up_w(be, mw.embed) : quant_ops(be).host_resident_table(mw.embed, be.weight_dtype());
  final_norm_ = up_f32(be, mw.final_norm);
  lm_head_ = mw.tied ? embed_ : up_w(be, mw.lm_head);
  for (const LayerWeights& lw : mw.layers) {
    prefix = "layers." + std::to_string(layer_count()) + ".";
    auto d = std::make_unique<DeviceLayer>();
    d->kind = lw.kind;
    d->input_norm = up_f32(be, lw.input_norm);
    d->post_norm = up_f32(be, lw.post_norm);
    if (lw.kind == LayerKind::FullAttention) {
      d->q_proj = up_l("self_attn.q_proj", lw.attn.q_proj);
      d->k_proj = up_l("self_attn.k_proj", lw.attn.k_proj);
      d->v_proj = up_l("self_attn.v_proj", lw.attn.v_proj);
      d->o_proj = up_l("self_attn.o_proj", lw.attn.o_proj);
      d->q_norm = up_f32(be, lw.attn.q_norm);
      d->k_norm = up_f32(be, lw.attn.k_norm);
    } else {
      d->in_qkv = up_l("linear_attn.in_proj_qkv", lw.lin.in_proj_qkv);
      d->in_z = up_l("linear_attn.in_proj_z", lw.lin.in_proj_z);
      d->in_b = up_l("linear_attn.in_proj_b", lw.lin.in_proj_b);
      d->in_a = up_l("linear_attn.in_proj_a", lw.lin.in_proj_a);
      d->conv = up_f32(be, lw.lin.conv1d);
      d->dt_bias = up_f32(be, lw.lin.dt_bias);
      d->A_log = up_f32(be, lw.lin.A_log);
      d->lin_norm = up_f32(be, lw.lin.norm);
      d->out_proj = up_l("linear_attn.out_proj", lw.lin.out_proj);
    }
    if (cfg_.is_moe()) {
      d->router = up_w(be, lw.moe.router);
      d->experts_gate_up = up_experts(be, mw, mine(lw.moe.gate_up));
      d->experts_down = up_experts(be, mw, mine(lw.moe.down));
      if (cfg_.has_shared_expert()) {
        d->sh_gate = up_l("mlp.shared_expert.gate_proj", lw.moe.shared.gate_proj);
        d->sh_up = up_l("mlp.shared_expert.up_proj", lw.moe.shared.up_proj);
        d->sh_down = up_l("mlp.shared_expert.down_proj", lw.moe.shared.down_proj);
        d->sh_gate_w = up_w(be, lw.moe.shared_gate);
      }
    } else {
      d->gate_proj = up_l("mlp.gate_proj", lw.mlp.gate_proj);
      d->up_proj = up_l("mlp.up_proj", lw.mlp.up_proj);
      d->down_proj = up_l("mlp.down_proj", lw.mlp.down_proj);
    }
    if (sharded_) sharded_->add(*d);  // d's full copy is freed here; this rank keeps its shard
    else layers_.push_back(std::move(d));
  }
}

Qwen35Model::~Qwen35Model() = default;

void Qwen35Model::set_vision(std::shared_ptr<const VisionWeights> vision) {
  vision_ = vision ? std::make_unique<VisionEncoder>(be_, std::move(vision)) : nullptr;
}

size_t Qwen35Model::layer_count() const { return sharded_ ? sharded_->layers() : layers_.size(); }

LayerKind Qwen35Model::layer_kind(size_t i) const {
  return sharded_ ? sharded_->layout(i).kind : layers_.at(i)->kind;
}

const DeviceLayerWeights& Qwen35Model::layer_weights(size_t i, std::optional<size_t> next) {
  return sharded_ ? sharded_->acquire(i, next) : *layers_.at(i);
}

void Qwen35Model::layer_done(size_t i) {
  if (sharded_) sharded_->release(i);
}

int Qwen35Model::gate_slot(int64_t i) const { return static_cast<int>(layer_count() + 2 * i); }

void Qwen35Model::settle_gate_up(const StepOptions& opts, int64_t i, bool all) {
  // A layer's gate/up copies are waited for max(k-1, 1) layers of forward later (k = mlp_host_every), or (all)
  // before the loss. settle() of a slot already settled does nothing.
  const int64_t k = opts.keep.mlp_host_every, L = static_cast<int64_t>(layer_count());
  if (k <= 0) return;
  const int64_t first = all ? 0 : i - std::max<int64_t>(k - 1, 1), last = all ? L - 1 : first;
  for (int64_t j = std::max<int64_t>(first, 0); j <= last; ++j)
    if (gate_up_stashed(opts, j)) {
      stash_->settle(gate_slot(j));
      stash_->settle(gate_slot(j) + 1);
    }
}

int64_t Qwen35Model::host_stash_bytes() const { return stash_ ? stash_->host_bytes() : 0; }

ActivationStash* Qwen35Model::input_stash(const StepOptions& opts) {
  if (!opts.backward || !opts.gradient_checkpointing || !opts.keep.inputs_on_host) return nullptr;
  if (!stash_) stash_ = make_activation_stash(be_);
  return stash_.get();
}

bool Qwen35Model::input_stashed(const StepOptions& opts, int64_t i) const {
  return opts.keep.inputs_on_host && opts.checkpointed(i) && i + 1 < static_cast<int64_t>(layer_count());
}

bool Qwen35Model::gate_up_stashed(const StepOptions& opts, int64_t i) const {
  return !cfg_.is_moe() && opts.checkpointed(i) && opts.keep.mlp_stashed(i, static_cast<int64_t>(layer_count()));
}

SeqLayout Qwen35Model::make_layout(const Batch& batch) {
  check(!batch.input_ids.empty(), "internal: empty batch");
  SeqLayout s;
  s.host_cu_seqlens = batch.cu_seqlens;
  s.cu_seqlens = be_.upload_i32(batch.cu_seqlens);
  s.positions = be_.upload_i32(batch.positions);
  if (!batch.mrope_positions.empty()) {
    check(batch.mrope_positions.size() == 3 * batch.input_ids.size(), "internal: mrope positions are not [3, T]");
    const auto T = static_cast<int64_t>(batch.input_ids.size());
    s.mrope_positions = be_.upload_i32(batch.mrope_positions).view({3, T});
  }
  for (size_t i = 1; i < batch.cu_seqlens.size(); ++i)
    s.max_seqlen = std::max(s.max_seqlen, batch.cu_seqlens[i] - batch.cu_seqlens[i - 1]);
  check_ids(batch);
  return s;
}

void Qwen35Model::check_ids(const Batch& batch) const {
  for (int32_t id : batch.input_ids) {
    check(id >= 0 && id < cfg_.vocab_size, "token id " + std::to_string(id) + " is out of the model's vocabulary (0.." +
                                               std::to_string(cfg_.vocab_size - 1) + ")");
  }
}

void Qwen35Model::embed_tokens(const Tensor& ids, Tensor& x) { be_.embedding_fwd(ids, embed_, x); }

Tensor Qwen35Model::hidden_states(const Batch& batch, const Tensor& ids, const SeqLayout& seq, LoraAdapter* lora,
                                  const StepOptions& opts, Activations* acts, Tensor* moe_load) {
  const int64_t T = static_cast<int64_t>(batch.input_ids.size()), H = cfg_.hidden_size;
  const DType dt = be_.compute_dtype();
  Tensor x = be_.alloc({T, H}, dt);
  embed_tokens(ids, x);
  if (!batch.image_grids.empty()) {
    check(vision_ != nullptr, "a batch with images needs the checkpoint's vision tower (model.visual.*)");
    const std::vector<int32_t> rows =
        image_token_rows(vision_->config(), batch.input_ids, batch.pixel_values, batch.image_grids, H);
    const bool keep = acts && VisionEncoder::adapts(lora);
    const Tensor embeds = vision_->forward(batch.pixel_values, batch.image_grids, lora, opts.lora,
                                           keep ? &acts->vision : nullptr);
    image_embeds_insert(be_, rows, embeds, x);
    if (keep) {
      acts->image_rows = rows;
      acts->vision_kept = true;
    }
  }
  const size_t L = layer_count();
  if (acts) acts->layers.resize(L);
  // This step's s·B in the padded mixer matrices' tails (K-concatenated LoRA products; nothing where not padded).
  if (lora && !sharded_)
    for (size_t i = 0; i < L; ++i) kcat_write_tails(be_, mixer_group(*layers_[i], layer_lora_find(lora, static_cast<int>(i))));
  // RecomputeKeep::inputs_on_host: a stashed input's copy starts before its layer's forward and is waited for
  // after the next layer's (two layers of compute to hide it behind).
  ActivationStash* stash = acts ? input_stash(opts) : nullptr;
  for (size_t i = 0; i < L; ++i) {
    const auto li = static_cast<int64_t>(i);
    const bool stashed = stash && input_stashed(opts, li);
    if (stashed) stash->put(static_cast<int>(i), x);
    BlockContext ctx{be_, cfg_, seq, opts.lora, static_cast<int>(i)};
    ctx.ep = ep_;
    Tensor load_row;
    if (moe_load) {
      load_row = moe_load->index(static_cast<int64_t>(i));
      ctx.moe_load = &load_row;
    }
    const LayerLora l = layer_lora_find(lora, static_cast<int>(i));
    LayerCache scratch;
    const bool ckpt = opts.checkpointed(static_cast<int64_t>(i));
    LayerCache& c = (acts && !ckpt) ? acts->layers[i] : scratch;
    ctx.activations_kept = acts && !ckpt;
    ctx.keep_gdn_core = acts && ckpt && opts.keep.gdn_core;
    const bool gu_stashed = stash && gate_up_stashed(opts, li);
    ctx.keep_mlp_gu = acts && ckpt && !cfg_.is_moe() && (opts.keep.mlp(li) || gu_stashed);
    Tensor next = layer_fwd(ctx, layer_weights(i, i + 1), l, x, c);
    if (!acts || i + 1 < L) layer_done(i);  // the last layer's backward comes next: it stays gathered
    // A gate/up copy (100-200 MB) holds up the inputs' copies behind it: they are then waited for a layer later.
    const int64_t lag = opts.keep.mlp_host_every > 0 ? 2 : 1;
    if (stash && li >= lag && input_stashed(opts, li - lag)) stash->settle(static_cast<int>(li - lag));
    if (stash) settle_gate_up(opts, li, false);
    if (acts && ckpt) {
      if (!stashed) acts->layers[i].x_in = x;
      keep_for_recompute(opts.keep, static_cast<int64_t>(i), cfg_.is_moe(), c, acts->layers[i]);
      if (gu_stashed) {
        stash->put(gate_slot(li), c.mlp.g);
        stash->put(gate_slot(li) + 1, c.mlp.u);
      }
      // Expert parallel: the recompute reuses this routing and exchange plan (no host wait, same rows).
      if (ep_ && cfg_.is_moe()) acts->layers[i].moe = moe_routing_kept(c.moe);
    }
    x = next;
  }
  if (stash) {  // what is still on its way to the host, waited for before the loss
    for (int64_t j = std::max<int64_t>(0, static_cast<int64_t>(L) - 2); j < static_cast<int64_t>(L); ++j)
      if (input_stashed(opts, j)) stash->settle(static_cast<int>(j));
    settle_gate_up(opts, static_cast<int64_t>(L), true);
  }
  Tensor h = be_.alloc({T, H}, dt);
  Tensor rstd = be_.alloc({T}, DType::F32);
  be_.rmsnorm_fwd(x, final_norm_, static_cast<float>(cfg_.rms_eps), true, h, rstd);
  if (acts) {
    acts->x_final = x;
    acts->rstd_final = rstd;
  }
  return h;
}

bool loss_on_target_rows(const Batch& batch) {
  const int64_t T = static_cast<int64_t>(batch.targets.size());
  // Worth a gather and a scatter only when at least an eighth of the rows have no target; a batch without
  // targets keeps the plain path (a loss of 0 over every row).
  return batch.num_targets > 0 && batch.num_targets * 8 <= T * 7;
}

std::vector<int32_t> loss_target_rows(const Batch& batch) {
  if (!loss_on_target_rows(batch)) return {};
  const int64_t T = static_cast<int64_t>(batch.targets.size());
  std::vector<int32_t> rows;
  rows.reserve(static_cast<size_t>(batch.num_targets));
  for (int64_t t = 0; t < T; ++t)
    if (batch.targets[static_cast<size_t>(t)] >= 0) rows.push_back(static_cast<int32_t>(t));
  return rows;
}

StepOutput Qwen35Model::step(const Batch& batch, LoraAdapter* lora, const StepOptions& opts) {
  StepOutput out;
  // The mixer inputs' base matrices padded for the K-concatenated LoRA products (once per adapter rank, before
  // any recording: lora_linear.h); a sharded model's layers are not.
  if (lora && !sharded_) {
    std::vector<KcatPadGroup> groups(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::array<BaseMatrix*, 4> ws{};
      std::array<LoraModule*, 4> ls{};
      const size_t n = mixer_inputs(*layers_[i], layer_lora_find(lora, static_cast<int>(i)), ws, ls);
      groups[i].ws.assign(ws.begin(), ws.begin() + static_cast<std::ptrdiff_t>(n));
      groups[i].loras.assign(ls.begin(), ls.begin() + static_cast<std::ptrdiff_t>(n));
    }
    kcat_pad_weights(be_, groups);
  }
  if (step_recorded(batch, lora, opts, out)) return out;
  const SeqLayout seq = make_layout(batch);
  const Tensor ids = be_.upload_i32(batch.input_ids), targets = be_.upload_i32(batch.targets);
  step_ops(batch, seq, ids, targets, lora, opts, out, nullptr);
  return out;
}

void Qwen35Model::step_ops(const Batch& batch, const SeqLayout& seq, const Tensor& ids, const Tensor& targets,
                           LoraAdapter* lora, const StepOptions& opts, StepOutput& out, const DeviceScalars* dev) {
  const int64_t T = static_cast<int64_t>(batch.input_ids.size()), H = cfg_.hidden_size;
  const DType dt = be_.compute_dtype();
  Activations acts;
  const LoraComputeCopies lora_copies(be_, lora);
  // Router statistics from the first forward only (a checkpointed layer's recompute is not counted twice).
  if (cfg_.is_moe()) out.moe_load = be_.zeros({static_cast<int64_t>(layer_count()), cfg_.num_experts}, DType::F32);
  Tensor h = hidden_states(batch, ids, seq, lora, opts, opts.backward ? &acts : nullptr,
                           out.moe_load.defined() ? &out.moe_load : nullptr);
  // Expert parallel: the exchanges done (polling for faults) before the host waits for the loss.
  if (ep_) ep_->finish();

  out.targets = batch.num_targets;
  Tensor dh;
  if (opts.backward) dh = be_.alloc({T, H}, dt);
  const std::vector<int32_t> loss_rows = opts.fused_loss ? loss_target_rows(batch) : std::vector<int32_t>{};
  if (!loss_rows.empty()) {
    // Rows without a target (prompt tokens, each sequence's last) add nothing to the loss or to dh: the loss
    // (the lm_head GEMMs, the largest of a small model's step) runs on the target rows, dh is zero elsewhere.
    check(!dev, "internal: a recorded step runs the loss on every row");
    const int64_t n = static_cast<int64_t>(loss_rows.size());
    const Tensor rows = be_.upload_i32(loss_rows);
    Tensor hc = be_.alloc({n, H}, dt), dhc;
    be_.gather_rows(h, rows, hc);
    std::vector<int32_t> row_targets(loss_rows.size());
    for (size_t i = 0; i < loss_rows.size(); ++i) row_targets[i] = batch.targets[static_cast<size_t>(loss_rows[i])];
    if (opts.backward) dhc = be_.alloc({n, H}, dt);
    out.loss_sum = be_.linear_cross_entropy(hc, lm_head_, be_.upload_i32(row_targets), opts.grad_scale,
                                            opts.backward ? &dhc : nullptr, opts.loss_chunk_rows, opts.loss_logits);
    if (opts.backward) {
      be_.fill(dh, 0.f);
      be_.scatter_add_rows(dhc, rows, Tensor{}, dh);
    }
  } else if (opts.fused_loss && dev) {
    be_.linear_cross_entropy_into(h, lm_head_, targets, dev->grad_scale, opts.backward ? &dh : nullptr,
                                  opts.loss_chunk_rows, opts.loss_logits, dev->loss);
  } else if (opts.fused_loss) {
    out.loss_sum = be_.linear_cross_entropy(h, lm_head_, targets, opts.grad_scale, opts.backward ? &dh : nullptr,
                                            opts.loss_chunk_rows, opts.loss_logits);
  } else {
    check(!dev, "internal: a device loss needs the fused loss");
    Tensor logits = be_.alloc({T, cfg_.vocab_size}, dt);
    be_.gemm(h, false, lm_head_, true, logits, 1.f, 0.f);
    out.loss_sum = be_.cross_entropy(logits, targets, opts.grad_scale, opts.backward ? &logits : nullptr);
    if (opts.backward) be_.gemm(logits, false, lm_head_, false, dh, 1.f, 0.f);
  }
  if (!opts.backward) return;

  Tensor dx = be_.alloc({T, H}, dt);
  be_.rmsnorm_bwd(dh, acts.x_final, final_norm_, acts.rstd_final, true, dx);
  // RecomputeKeep::inputs_on_host: the input of the layer below starts coming back before this layer's
  // recompute and backward (one layer of compute to hide it behind).
  ActivationStash* stash = input_stash(opts);
  for (int i = static_cast<int>(layer_count()) - 1; i >= 0; --i) {
    if (stash && i > 0 && input_stashed(opts, i - 1)) stash->fetch(i - 1);
    if (stash && i > 0 && gate_up_stashed(opts, i - 1)) {
      stash->fetch(gate_slot(i - 1));
      stash->fetch(gate_slot(i - 1) + 1);
    }
    BlockContext ctx{be_, cfg_, seq, opts.lora, i};
    ctx.ep = ep_;
    const LayerLora l = layer_lora_find(lora, i);
    LayerCache& c = acts.layers[static_cast<size_t>(i)];
    const DeviceLayerWeights& w =
        layer_weights(static_cast<size_t>(i), i > 0 ? std::optional<size_t>(i - 1) : std::nullopt);
    if (opts.checkpointed(i)) {
      const Tensor x_in = stash && input_stashed(opts, i) ? stash->take(i) : c.x_in;
      MoeCache routing = std::move(c.moe);  // routed: kept by the first forward (expert parallel)
      c = recompute_start(c);               // what the first forward kept (StepOptions::keep), else empty
      if (routing.routed) c.moe = std::move(routing);
      if (stash && gate_up_stashed(opts, i)) {  // skips the gate/up base GEMMs as RecomputeKeep::mlp does
        c.mlp.g = stash->take(gate_slot(i));
        c.mlp.u = stash->take(gate_slot(i) + 1);
      }
      BlockContext recompute = ctx;
      recompute.keep_for_backward = true;
      layer_fwd(recompute, w, l, x_in, c);
    }
    dx = layer_bwd(ctx, w, l, dx, c);
    layer_done(static_cast<size_t>(i));
    c = LayerCache{};  // free this layer's activations
    if (opts.on_layer_backward) opts.on_layer_backward(i);
  }
  if (ep_) ep_->finish();
  // dx is now the gradient w.r.t. the input embeddings: its image-token rows go back through the tower.
  if (acts.vision_kept) vision_->backward(image_embeds_grad(be_, acts.image_rows, dx), *lora, opts.lora, acts.vision);
}

Tensor Qwen35Model::logits(const Batch& batch, LoraAdapter* lora) {
  const SeqLayout seq = make_layout(batch);
  StepOptions opts;
  const LoraComputeCopies lora_copies(be_, lora);
  Tensor h = hidden_states(batch, be_.upload_i32(batch.input_ids), seq, lora, opts, nullptr);
  if (ep_) ep_->finish();
  Tensor logits = be_.alloc({h.rows(), cfg_.vocab_size}, be_.compute_dtype());
  be_.gemm(h, false, lm_head_, true, logits, 1.f, 0.f);
  return be_.download(logits, DType::F32);
}

}  // namespace deltatune
