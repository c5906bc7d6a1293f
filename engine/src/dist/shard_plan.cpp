// Per-GPU memory of each weight layout, from the model's tensor shapes (ModelInfo) and estimate_vram's
// single-GPU terms (activations, logits, overhead), which do not depend on how the weights are split.
#include "core/bytes_text.h"
#include "deltatune/shard_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "deltatune/memory_plan.h"

namespace deltatune {

namespace {

constexpr WeightLayout kLayouts[] = {WeightLayout::Replicated, WeightLayout::Sharded, WeightLayout::ExpertParallel,
                                     WeightLayout::ExpertParallelSharded};

int64_t group_params(const ModelInfo& info, const std::string& g) {
  const auto it = info.params_per_group.find(g);
  return it == info.params_per_group.end() ? 0 : it->second;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Frozen weight bytes by what the layouts split: the units gathered in execution order (embedding, each
// decoder layer, lm_head) and the expert part of each layer.
struct FrozenBytes {
  std::vector<int64_t> units;          // embed, layer 0..L-1, head (tied: the embedding again)
  std::vector<int64_t> expert_part;    // per unit: bytes of the routed experts (0 for embed/head)
  int64_t stored = 0;                  // bytes held once (a tied head is the embedding's storage)
  int64_t experts = 0;                 // all routed experts
  int64_t scratch = 0;                 // quantized base: the bf16 copy of one matrix dequantized for its GEMM
};

FrozenBytes frozen_bytes(const ModelInfo& info, const std::string& quantization, int64_t estimate_weights) {
  // An untied embedding table stays on the host (estimate_vram's terms). A quantized base holds the linear
  // matrices (attn, linear_attn, mlp, shared_expert, experts) quantized; the router, head and norms stay bf16.
  const bool quantized = quantization == "fp8" || quantization == "nf4";
  const double per_quantized =
      quantization == "fp8" ? 1.0 + 4.0 / (128 * 128) : 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
  auto bytes = [&](const std::string& g) -> int64_t {
    const int64_t n = group_params(info, g);
    if (g == "embed" && !info.tied_embeddings) return 0;
    const bool q = quantized && (g == "attn" || g == "linear_attn" || g == "mlp" || g == "shared_expert" ||
                                 g == "experts");
    return q ? static_cast<int64_t>(static_cast<double>(n) * per_quantized) : 2 * n;
  };
  int64_t n_full = 0, n_lin = 0;
  for (const auto& t : info.layer_types) (t == "full_attention" ? n_full : n_lin) += 1;
  const int64_t L = std::max<int64_t>(info.num_layers, 1);
  const int64_t per_layer_ffn = (bytes("mlp") + bytes("experts") + bytes("router") + bytes("shared_expert") +
                                 bytes("norm") + bytes("other")) / L;
  FrozenBytes f;
  f.experts = bytes("experts");
  const int64_t embed = bytes("embed"), head = info.tied_embeddings ? bytes("embed") : bytes("lm_head");
  f.units.push_back(embed);
  f.expert_part.push_back(0);
  for (const auto& t : info.layer_types) {
    const bool full = t == "full_attention";
    const int64_t mixer = full ? (n_full ? bytes("attn") / n_full : 0) : (n_lin ? bytes("linear_attn") / n_lin : 0);
    f.units.push_back(mixer + per_layer_ffn);
    f.expert_part.push_back(f.experts / L);
  }
  f.units.push_back(head);
  f.expert_part.push_back(0);
  for (const auto& [g, n] : info.params_per_group) f.stored += bytes(g);
  // What estimate_vram counts beyond the stored weights: the bf16 copy of the largest quantized matrix.
  f.scratch = std::max<int64_t>(0, estimate_weights - f.stored);
  return f;
}

// The largest sum of two consecutive units (what is in flight while one computes and the next arrives).
int64_t two_in_flight(const std::vector<int64_t>& units) {
  int64_t m = units.empty() ? 0 : units[0];
  for (size_t i = 1; i < units.size(); ++i) m = std::max(m, units[i - 1] + units[i]);
  return m;
}

// Bytes a GPU receives to all-gather every unit once, out of N shards.
int64_t gather_bytes(const std::vector<int64_t>& units, size_t from, size_t to, int n) {
  int64_t s = 0;
  for (size_t i = from; i < to && i < units.size(); ++i) s += units[i] - ceil_div(units[i], n);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Of the layouts that fit, the first in kPreference order: replicated (nothing travels), expert parallel,
// sharded, expert parallel sharded. Measured (H200s on NVLink, r=16 on every group incl. experts, 4096 tokens per
// GPU, all layers checkpointed, bench_train_step, session 24, after expert parallel stopped waiting on the host
// for each all-to-all): 35B-A3B on 2 GPUs expert parallel 11,062 tok/s (43.8 GiB per GPU) vs sharded 10,782
// (52.5 GiB); 122B-A10B on 4 GPUs expert parallel 10,029 (79.4 GiB) vs sharded 8,130 (99.6 GiB), and with 24 of
// the 48 layers checkpointed 11,703 (100.9 GiB) vs 9,235 (125.4 GiB). Expert parallel moves only the routed
// token rows (T·k rows of H per exchange) where sharded gathers every layer's weights twice per micro-batch
// (~8x the bytes at 122B, where the gathers no longer hide behind the compute), and it keeps less per GPU.
// (Session 23, when each MoE layer's exchange waited on the host 4 times forward and 2 backward, sharded was
// ~10% faster at 35B-A3B; that is why sharded came first then.)
constexpr WeightLayout kPreference[] = {WeightLayout::Replicated, WeightLayout::ExpertParallel,
                                        WeightLayout::Sharded, WeightLayout::ExpertParallelSharded};

// Why the plan's choice (p.choice() set).
std::string reason_for(const ShardPlan& p) {
  bool ep_applies = false;
  for (const LayoutEstimate& e : p.layouts) ep_applies |= e.layout == WeightLayout::ExpertParallel && e.applicable;
  const LayoutEstimate* c = p.choice();
  return c->layout == WeightLayout::Replicated
             ? "every GPU holds the whole model: no weights or tokens travel between GPUs"
         : c->layout == WeightLayout::ExpertParallel
             ? std::string("replicated does not fit; the experts split over the GPUs, measured faster than sharded (") +
                   gib_text(c->moved_per_micro_batch) + " received per GPU per micro-batch)"
         : c->layout == WeightLayout::Sharded
             ? std::string("replicated does not fit") + (ep_applies ? " nor expert parallel" : "") +
                   "; the decoder layers split over the GPUs (" + gib_text(c->moved_per_micro_batch) +
                   " gathered per GPU per micro-batch)"
             : std::string("replicated, expert parallel and sharded do not fit; experts split and the rest sharded (") +
                   gib_text(c->moved_per_micro_batch) + " received per GPU per micro-batch)";
}

ShardPlan plan(const ModelInfo& info, const ShardPlanSettings& s, const GpuPool& gpus, bool advise);

bool any_fits(const ModelInfo& info, const ShardPlanSettings& s, const GpuPool& gpus) {
  return plan(info, s, gpus, false).chosen >= 0;
}

std::vector<std::string> what_would_fit(const ModelInfo& info, const ShardPlan& p) {
  std::vector<std::string> out;
  const ShardPlanSettings& s = p.settings;
  // Fewer LoRA groups: drop the largest group whose removal alone fits.
  std::vector<std::pair<int64_t, std::string>> by_size;
  const auto lora = lora_params_per_group(info, s.lora_r);
  for (const auto& g : p.lora_groups) by_size.emplace_back(lora.count(g) ? lora.at(g) : 0, g);
  std::sort(by_size.rbegin(), by_size.rend());
  if (p.lora_groups.size() > 1) {
    for (const auto& [n, g] : by_size) {
      ShardPlanSettings t = s;
      t.lora_groups.clear();
      for (const auto& h : p.lora_groups)
        if (h != g) t.lora_groups.push_back(h);
      if (any_fits(info, t, p.gpus)) {
        out.push_back("fewer LoRA groups: " + join(t.lora_groups) + " (without " + g + ")");
        break;
      }
    }
  }
  for (int r = s.lora_r / 2; r >= 1; r /= 2) {
    ShardPlanSettings t = s;
    t.lora_r = r;
    t.lora_groups = p.lora_groups;
    if (any_fits(info, t, p.gpus)) {
      out.push_back("lower LoRA rank: r=" + std::to_string(r) + " instead of " + std::to_string(s.lora_r));
      break;
    }
  }
  // More GPUs of the same memory (up to what one host or a small cluster has).
  for (int n = p.gpus.count + 1; n <= 256; ++n) {
    GpuPool g = p.gpus;
    g.count = n;
    ShardPlanSettings t = s;
    t.lora_groups = p.lora_groups;
    const ShardPlan q = plan(info, t, g, false);
    if (q.chosen >= 0) {
      out.push_back("more GPUs: " + std::to_string(n) + " of " + gib_text(p.gpus.memory_bytes) + " (" +
                    weight_layout_name(q.choice()->layout) + ")");
      break;
    }
  }
  if (s.base_quantization == "none") {
    for (const char* q : {"fp8", "nf4"}) {
      ShardPlanSettings t = s;
      t.base_quantization = q;
      t.lora_groups = p.lora_groups;
      if (any_fits(info, t, p.gpus)) {
        out.push_back(std::string("a quantized base: base_quantization ") + q);
        break;
      }
    }
  }
  if (!s.gradient_checkpointing || s.checkpoint_layers >= 0) {
    ShardPlanSettings t = s;
    t.gradient_checkpointing = true;
    t.checkpoint_layers = -1;
    t.lora_groups = p.lora_groups;
    if (any_fits(info, t, p.gpus)) out.push_back("gradient checkpointing on every layer");
  }
  for (int64_t tok = s.tokens_per_step / 2; tok >= 256; tok /= 2) {
    ShardPlanSettings t = s;
    t.tokens_per_step = tok;
    t.lora_groups = p.lora_groups;
    if (any_fits(info, t, p.gpus)) {
      out.push_back("fewer tokens per micro-batch: " + std::to_string(tok) + " instead of " +
                    std::to_string(s.tokens_per_step));
      break;
    }
  }
  return out;
}

ShardPlan plan(const ModelInfo& info, const ShardPlanSettings& s, const GpuPool& gpus, bool advise) {
  check(gpus.count >= 1, "GPU count must be at least 1, got " + std::to_string(gpus.count));
  check(gpus.memory_bytes > 0, "GPU memory must be given (e.g. 80GiB)");
  check(s.lora_r >= 1, "LoRA rank must be at least 1, got " + std::to_string(s.lora_r));
  ShardPlan p;
  p.gpus = gpus;
  p.settings = s;
  if (s.gradient_checkpointing && s.keep.any()) p.keep_text = recompute_keep_text(info, s.keep, s.checkpoint_layers);
  if (s.lora_groups.empty()) {
    p.lora_groups = lora_default_groups(info);
  } else {
    for (const auto& g : s.lora_groups)
      check(std::find(info.lora_groups.begin(), info.lora_groups.end(), g) != info.lora_groups.end(),
            "LoRA group '" + g + "' is not one of this model's: " + join(info.lora_groups));
    p.lora_groups = s.lora_groups;
  }

  // Activations with the plan's LoRA groups (expert LoRA's per-token intermediates included).
  const VramEstimate est = estimate_vram(info, s.lora_r, s.tokens_per_step, s.fused_loss, s.gradient_checkpointing,
                                         s.checkpoint_layers, s.base_quantization, 1024, s.images, p.lora_groups,
                                         false, s.loss_logits);
  const FrozenBytes f = frozen_bytes(info, s.base_quantization, est.weights);
  const int n = gpus.count;
  const int64_t T = std::max<int64_t>(s.tokens_per_step, 1), H = info.hidden_size, k = info.num_experts_per_tok;
  const int64_t L = info.num_layers;
  const int64_t n_ckpt = !s.gradient_checkpointing ? 0 : s.checkpoint_layers < 0 ? L : std::min(s.checkpoint_layers, L);
  const int64_t keep_bytes = recompute_keep_bytes(info, T, n_ckpt, s.keep);  // selective recompute

  const auto lora = lora_params_per_group(info, s.lora_r);
  int64_t lora_dense = 0, lora_experts = 0;
  for (const auto& g : p.lora_groups) (g == "experts" ? lora_experts : lora_dense) += lora.count(g) ? lora.at(g) : 0;

  // Token exchange of expert parallel per micro-batch: dispatch and combine (bf16 rows of H) in the forward,
  // their gradients in the backward, and the forward again in a checkpointed layer's recompute.
  const int64_t exchange_rows = T * k;
  const int64_t exchanges = 4 * L + 2 * n_ckpt;

  std::vector<int64_t> dense_units = f.units;
  for (size_t i = 0; i < dense_units.size(); ++i) dense_units[i] -= f.expert_part[i];
  const size_t head = f.units.size() - 1;
  // The sharded layouts split the decoder layers only (model/sharded_layers): the embedding and lm_head stay
  // whole on every GPU (they are used outside the layer loop, by the loss and by generation). Gathers: every layer
  // in the forward and again in the backward; a recompute reuses the backward's gather.
  auto sharded_moved = [&](const std::vector<int64_t>& units) { return 2 * gather_bytes(units, 1, head, n); };
  auto resident_sharded = [&](const std::vector<int64_t>& units) {
    int64_t r = units[0] + (info.tied_embeddings ? 0 : units[head]);
    for (size_t i = 1; i < head; ++i) r += ceil_div(units[i], n);
    return r;
  };
  auto layers_in_flight = [&](const std::vector<int64_t>& units) {
    return two_in_flight(std::vector<int64_t>(units.begin() + 1, units.begin() + head));
  };

  for (WeightLayout layout : kLayouts) {
    LayoutEstimate e;
    e.layout = layout;
    e.applicable = true;
    const bool ep = layout == WeightLayout::ExpertParallel || layout == WeightLayout::ExpertParallelSharded;
    if (layout != WeightLayout::Replicated && n < 2) {
      e.applicable = false;
      e.not_applicable = "one GPU";
    } else if (ep && !info.is_moe) {
      e.applicable = false;
      e.not_applicable = "dense model (no experts)";
    } else if (ep && info.num_experts % n != 0) {
      e.applicable = false;
      e.not_applicable = std::to_string(info.num_experts) + " experts do not split evenly over " +
                         std::to_string(n) + " GPUs";
    }
    e.lora_and_optimizer = 16 * (lora_dense + (ep ? ceil_div(lora_experts, n) : lora_experts));
    e.activations = est.activations + keep_bytes;
    if (ep) {
      // Per routed row the two int32 maps between received and expert-major order (layers whose activations are
      // kept: to_local, to_source), and a checkpointed layer's kept routing and exchange plan (moe_routing_kept:
      // idx, w, row_token, row_slot, slot_row and the two maps, 7 x 4 bytes per routed row; the one-GPU estimate
      // counts none of it for a checkpointed layer).
      e.activations += (L - n_ckpt) * exchange_rows * 8 + n_ckpt * exchange_rows * 28;
    }
    e.logits = est.logits;
    e.overhead = est.overhead;
    e.backend_buffers = est.backend_buffers;
    e.vision = est.vision_weights + est.vision_activations;
    switch (layout) {
      case WeightLayout::Replicated:
        e.frozen_resident = f.stored + f.scratch;
        break;
      case WeightLayout::Sharded:
        e.frozen_resident = resident_sharded(f.units) + f.scratch;
        e.gathered_in_flight = layers_in_flight(f.units);
        e.moved_per_micro_batch = sharded_moved(f.units);
        break;
      case WeightLayout::ExpertParallel:
        e.frozen_resident = f.stored - f.experts + ceil_div(f.experts, n) + f.scratch;
        break;
      case WeightLayout::ExpertParallelSharded:
        e.frozen_resident = resident_sharded(dense_units) + ceil_div(f.experts, n) + f.scratch;
        e.gathered_in_flight = layers_in_flight(dense_units);
        e.moved_per_micro_batch = sharded_moved(dense_units);
        break;
    }
    if (ep) {
      // The received rows R (model/expert_parallel.cpp): exactly the rows every rank routed to this GPU's experts,
      // no capacity cap, so from 0 to N·T·k. Counted balanced, R = T·k (as many as this GPU's tokens send out):
      // then the layer holds what the one-GPU layer holds ([R, .] instead of [T·k, .]), but for the receive buffer
      // [R, H] beside the expert output in the forward's down projection (one [T·k, H]). The second [T·k, H] is
      // room for uneven routing: a checkpointed layer's recompute + backward holds 6H + 10Ie + 12r + 8 bytes per
      // received row (kept xl, gu, h, LoRA u, maps; recv, dgu, dxl, du), so R up to ~1.2 T·k at 122B-A10B.
      // Session 24 (random weights, rank 0, older layer code): with 24 / 36 layers kept the peaks are 0.09 / 0.17
      // GiB above this estimate (+ the table then on the GPU), ~1% more rows than T·k on average if it is all R
      // (PERF_NOTES session 29 epmem29).
      e.exchange_buffers = 2 * exchange_rows * H * 2;
      e.moved_per_micro_batch += exchanges * (exchange_rows - ceil_div(exchange_rows, n)) * H * 2;
      // The adapter's setup (train_run_setup.cpp restore_or_create_run, bench_train_step): the expert LoRA is
      // sliced on the host (DataParallel::scatter_expert_lora; a resume restores rank 0's on the host first), so a
      // GPU only ever holds its own adapter: fp32 A, B, gradients and, resuming, both AdamW moments of the dense
      // modules and its experts' slice (lora_and_optimizer). DataParallel::attach then gives each expert module
      // new gradients beside its old ones (one gA or gB slice at a time) and the dense gradients their summed
      // buffer beside lora_to_backend's (4 bytes per dense LoRA parameter, until that one is freed). Before
      // (epmem29, session 24's 79.4 GiB) every GPU first held the whole adapter: 16 bytes x every LoRA parameter.
      const int64_t largest_expert_grad = static_cast<int64_t>(s.lora_r) * info.num_experts *
                                          std::max(H, 2 * info.moe_intermediate_size);
      if (lora_experts > 0)
        e.adapter_setup = e.frozen_resident + e.backend_buffers + e.lora_and_optimizer +
                          4 * std::max(lora_dense, ceil_div(largest_expert_grad, n));
    }
    e.total = e.frozen_resident + e.gathered_in_flight + e.lora_and_optimizer + e.activations + e.logits +
              e.overhead + e.backend_buffers + e.exchange_buffers + e.vision;
    // Whole layers on every GPU pad their mixer inputs for the K-concatenated LoRA products at the first step
    // (after the adapter's setup); sharded layers are not padded.
    if (layout == WeightLayout::Replicated || layout == WeightLayout::ExpertParallel) e.total += est.lora_kcat_pad;
    e.total = std::max(e.total, e.adapter_setup + e.overhead);
    e.fits = e.applicable && e.total <= gpus.memory_bytes - s.margin_bytes;
    p.layouts.push_back(e);
  }

  for (WeightLayout want : kPreference)
    for (size_t i = 0; i < p.layouts.size() && p.chosen < 0; ++i)
      if (p.layouts[i].layout == want && p.layouts[i].fits) p.chosen = static_cast<int>(i);
  if (p.choice()) {
    p.reason = reason_for(p);
  } else {
    p.reason = "does not fit " + std::to_string(n) + " GPU" + (n > 1 ? "s" : "") + " of " + gib_text(gpus.memory_bytes) +
               " with any layout";
    if (advise) p.would_fit = what_would_fit(info, p);
  }
  return p;
}

}  // namespace

const char* weight_layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::Replicated: return "replicated";
    case WeightLayout::Sharded: return "sharded";
    case WeightLayout::ExpertParallel: return "expert_parallel";
    case WeightLayout::ExpertParallelSharded: return "expert_parallel_sharded";
  }
  return "?";
}

ShardPlan plan_multi_gpu(const ModelInfo& info, const ShardPlanSettings& settings, const GpuPool& gpus) {
  return plan(info, settings, gpus, true);
}

ShardPlan plan_multi_gpu_auto_checkpointing(const ModelInfo& info, ShardPlanSettings settings, const GpuPool& gpus,
                                            const WeightLayout* layout) {
  settings.margin_bytes = memory_plan_margin(gpus.memory_bytes);
  settings.keep = RecomputeKeep{};
  const int64_t T = settings.tokens_per_step, L = info.num_layers;
  std::vector<ShardPlan> by_layers;  // [n]: n layers checkpointed (0: none), nothing kept
  for (int64_t n = 0; n <= L; ++n) {
    settings.gradient_checkpointing = n > 0;
    settings.checkpoint_layers = n;
    by_layers.push_back(plan(info, settings, gpus, false));
  }
  for (WeightLayout want : kPreference) {
    if (layout && want != *layout) continue;
    // The least recompute work that fits this layout: n layers checkpointed, the attention core kept or not, the
    // MLP gate/up kept on the first m of them (keep bytes add to the activations alone, in every layout).
    bool found = false;
    double best_cost = 0;
    int64_t best_n = 0;
    RecomputeKeep best_keep;
    for (int64_t n = 0; n <= L; ++n) {
      const ShardPlan& p = by_layers[static_cast<size_t>(n)];
      const auto it = std::find_if(p.layouts.begin(), p.layouts.end(),
                                   [&](const LayoutEstimate& e) { return e.layout == want && e.applicable; });
      if (it == p.layouts.end()) continue;
      const int64_t room = gpus.memory_bytes - settings.margin_bytes - it->total;
      const std::optional<RecomputeKeepChoice> k = cheapest_recompute_keep(info, T, n, room);
      if (k && (!found || k->cost < best_cost)) found = true, best_cost = k->cost, best_n = n, best_keep = k->keep;
    }
    if (!found) continue;
    settings.gradient_checkpointing = best_n > 0;
    settings.checkpoint_layers = best_n;
    settings.keep = best_n > 0 ? best_keep : RecomputeKeep{};
    ShardPlan p = plan(info, settings, gpus, false);
    const auto it = std::find_if(p.layouts.begin(), p.layouts.end(),
                                 [&](const LayoutEstimate& e) { return e.layout == want && e.fits; });
    check(it != p.layouts.end(), "internal: the checkpointing plan's layout does not fit");
    p.chosen = static_cast<int>(it - p.layouts.begin());
    p.reason = std::string(layout ? "as configured" : reason_for(p)) + "; " +
               (p.settings.gradient_checkpointing
                    ? std::to_string(p.settings.checkpoint_layers) + " of " + std::to_string(L) +
                          " layers checkpointed" +
                          (p.keep_text.empty() ? "" : " (kept for the recompute: " + p.keep_text + ")")
                    : std::string("no layers checkpointed")) +
               ", the fastest that fits with a " + gib_text(settings.margin_bytes) + " margin";
    return p;
  }
  settings.gradient_checkpointing = true;
  settings.checkpoint_layers = -1;
  settings.keep = RecomputeKeep{};
  ShardPlan p = plan(info, settings, gpus, true);
  if (layout && p.choice() && p.choice()->layout != *layout) {  // another layout fits; the configured one does not
    const WeightLayout auto_choice = p.choice()->layout;
    p.chosen = -1;
    p.reason = std::string(weight_layout_name(*layout)) + " does not fit even with every layer checkpointed";
    for (const LayoutEstimate& e : p.layouts)
      if (e.fits)
        p.would_fit.push_back(std::string("weight_layout: ") + weight_layout_name(e.layout) + " (" + gib_text(e.total) +
                              " per GPU with every layer checkpointed)");
    p.would_fit.push_back(std::string("weight_layout: auto (picks ") + weight_layout_name(auto_choice) + ")");
  }
  return p;
}

std::string shard_plan_text(const ShardPlan& p) {
  std::ostringstream o;
  const int n = p.gpus.count;
  const ShardPlanSettings& s = p.settings;
  std::string ckpt = !s.gradient_checkpointing ? ""
                     : s.checkpoint_layers < 0 ? "; gradient checkpointing"
                                               : "; gradient checkpointing of " + std::to_string(s.checkpoint_layers) +
                                                     " layers";
  if (!p.keep_text.empty()) ckpt += ", kept for the recompute: " + p.keep_text;
  o << "Memory plan for " << n << " GPU" << (n > 1 ? "s" : "") << " of " << gib_text(p.gpus.memory_bytes)
    << (s.margin_bytes ? " less a " + gib_text(s.margin_bytes) + " margin" : "") << " (LoRA r=" << s.lora_r << " on "
    << join(p.lora_groups) << "; " << s.tokens_per_step << " tokens per micro-batch and GPU; base "
    << s.base_quantization << ckpt << "):\n";
  for (const LayoutEstimate& e : p.layouts) {
    char name[32];
    std::snprintf(name, sizeof name, "%-24s", weight_layout_name(e.layout));
    o << "  " << name;
    if (!e.applicable) {
      o << "n/a (" << e.not_applicable << ")\n";
      continue;
    }
    o << gib_text(e.total) << " per GPU, " << (e.fits ? "fits" : "does not fit") << ": frozen " << gib_text(e.frozen_resident);
    if (e.gathered_in_flight) o << " + gathered " << gib_text(e.gathered_in_flight);
    o << ", LoRA+optimizer " << gib_text(e.lora_and_optimizer) << ", activations " << gib_text(e.activations) << ", logits "
      << gib_text(e.logits);
    if (e.exchange_buffers) o << ", token exchange " << gib_text(e.exchange_buffers);
    if (e.vision) o << ", vision tower " << gib_text(e.vision);
    o << ", overhead " << gib_text(e.overhead + e.backend_buffers);
    if (e.adapter_setup + e.overhead >= e.total)
      o << "; peak at the adapter's setup (the dense LoRA gradients twice while they move to the summed buffer) "
        << gib_text(e.adapter_setup + e.overhead);
    if (e.moved_per_micro_batch) o << "; receives " << gib_text(e.moved_per_micro_batch) << " per micro-batch";
    o << "\n";
  }
  if (const LayoutEstimate* c = p.choice()) {
    o << "Plan: " << weight_layout_name(c->layout) << " (" << gib_text(c->total) << " of "
      << gib_text(p.gpus.memory_bytes - s.margin_bytes) << " per GPU): " << p.reason << ".\n";
  } else {
    o << "Refused: " << p.reason << ".";
    if (p.would_fit.empty()) {
      o << " No single change of LoRA groups, rank, GPU count (up to 256), base quantization, gradient "
           "checkpointing or tokens per micro-batch fits.\n";
    } else {
      o << " Any one of these would fit:\n";
      for (const auto& w : p.would_fit) o << "  - " << w << "\n";
    }
  }
  return o.str();
}

int64_t parse_memory_size(const std::string& text) {
  std::string digits, unit;
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) digits += text[i++];
  while (i < text.size() && text[i] == ' ') ++i;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  static const std::map<std::string, double> units = {
      {"", 1.0},         {"b", 1.0},          {"kb", 1e3},          {"mb", 1e6},
      {"gb", 1e9},       {"tb", 1e12},        {"kib", 1024.0},      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},          {"tib", 1024.0 * 1024 * 1024 * 1024}};
  const auto u = units.find(unit);
  double v = 0;
  bool ok = !digits.empty() && u != units.end() && std::count(digits.begin(), digits.end(), '.') <= 1 && digits != ".";
  if (ok) {
    v = std::stod(digits) * u->second;
    ok = v >= 1;
  }
  check(ok, "memory size '" + text + "': expected a number with an optional unit (80GiB, 80GB, 81920MiB, bytes)");
  return static_cast<int64_t>(v);
}

}  // namespace deltatune
