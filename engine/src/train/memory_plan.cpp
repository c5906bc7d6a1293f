// The single-GPU memory plan behind `gradient_checkpointing: auto` (see deltatune/memory_plan.h).
#include "deltatune/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "core/bytes_text.h"
#include "deltatune/error.h"

namespace deltatune {

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// The loss is chunked by the engine's 1024 rows only: smaller chunks were measured not to lower the step's peak
// (H200, 2b and 9b shapes at 4096 tokens: 256 rows gave the same peak as 1024; the peak is in the backward, not
// in the loss), so planning with them would only under-predict.
constexpr int64_t kLossChunkRows = 1024;
// recompute_cost's weights of the cores against the base GEMMs (~700 TFLOP/s on an H200): the attention forward
// (9b, 4096 tokens: 137 GFLOP in ~0.5 ms) runs at ~2.5x a GEMM's time per FLOP; the GDN forward (chunked, ~6·dk·dv
// FLOPs per token and value head) at ~20x.
constexpr double kAttnCoreWeight = 2.5, kGdnCoreWeight = 20.0;
constexpr int64_t kGdnChunk = 64;  // the CUDA GDN core's chunk (kernels/gdn)
// RecomputeKeep::mlp_host_every: the copies' rate with both directions busy (H200, pinned, beside bf16 GEMMs:
// 47-50 GB/s, 54 one way; wave 33) less a margin, and the forward's GEMM rate used to time a layer's forward
// (~GEMM peak, so the time is on the short side and the copies are given too little rather than too much).
constexpr double kHostCopyBytesPerS = 40e9, kForwardFlopsPerS = 700e12;
// The cost of one more loss chunk in recompute_cost's units (GEMM FLOPs at ~700 TFLOP/s), per lm_head value (V·H):
// each chunk reads the lm_head weight again in both of its GEMMs. Fitted to the 2b loss with bf16 logits (V·H =
// 5.1e8, H200): 384-row chunks (11 a 4096-token step) against 768-row ones (6) took 13.53 against 12.93 ms of loss
// path (ncu, PERF_NOTES session 33 ce36) and the step 0.4-0.6 ms longer in one process (session 34): ~0.12 ms a
// chunk, 8.4e10 FLOPs at 700 TFLOP/s, ~165 a weight value.
constexpr double kLossChunkFlopsPerWeight = 165;

int64_t checkpointed_count(const ModelInfo& info, int64_t checkpointed_layers) {
  return checkpointed_layers < 0 ? info.num_layers : std::min(checkpointed_layers, info.num_layers);
}

bool full_attention(const ModelInfo& info, int64_t layer) {
  return info.layer_types.at(static_cast<size_t>(layer)) == "full_attention";
}

// Bytes one layer keeps under `keep` (T tokens).
int64_t layer_keep_bytes(const ModelInfo& info, int64_t T, int64_t layer, const RecomputeKeep& keep) {
  int64_t b = 0;
  if (full_attention(info, layer)) {
    if (keep.attn_core) b += T * info.num_attention_heads * (info.head_dim * 2 + 4);  // o bf16, lse fp32
  } else if (keep.gdn_core) {
    const int64_t HK = info.linear_num_key_heads, HV = info.linear_num_value_heads, dk = info.linear_key_head_dim,
                  dv = info.linear_value_head_dim;
    const int64_t chunks = T / kGdnChunk + 1;
    // o, W, V' (bf16 [T, HV, d]); M and the solve T (bf16 64 x 64 per chunk and head); chunk-start states (bf16);
    // the gates' cumulative sums (fp32 [T, HV]) and ρ of q and k (fp32 [T, HK] each).
    b += T * HV * (2 * dv + 2 * dk + 2 * dv) + 2 * chunks * HV * kGdnChunk * kGdnChunk * 2 +
         chunks * HV * dk * dv * 2 + T * HV * 4 + 2 * T * HK * 4;
  }
  if (!info.is_moe && keep.mlp(layer)) b += 2 * T * info.intermediate_size * 2;  // gate, up bf16
  return b;
}

}  // namespace

int64_t mlp_host_layers(const ModelInfo& info, int64_t checkpointed_layers, const RecomputeKeep& keep) {
  if (info.is_moe) return 0;
  const int64_t n = checkpointed_count(info, checkpointed_layers);
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += keep.mlp_stashed(i, info.num_layers) ? 1 : 0;
  return c;
}

int64_t recompute_keep_bytes(const ModelInfo& info, int64_t tokens, int64_t checkpointed_layers,
                             const RecomputeKeep& keep) {
  const int64_t T = std::max<int64_t>(tokens, 1), n = checkpointed_count(info, checkpointed_layers);
  int64_t b = 0;
  for (int64_t i = 0; i < n; ++i) b += layer_keep_bytes(info, T, i, keep);
  // Gate/up in host memory: one layer's on the device beside the recompute of the layer above (fetched a layer
  // ahead); a layer's own, taken for its recompute, stand for the ones the recompute would form.
  if (mlp_host_layers(info, checkpointed_layers, keep) > 0) b += 2 * T * info.intermediate_size * 2;
  return b;
}

int64_t mlp_host_spacing(const ModelInfo& info, int64_t tokens) {
  if (info.is_moe) return 0;
  const double T = static_cast<double>(std::max<int64_t>(tokens, 1)), H = static_cast<double>(info.hidden_size),
               I = static_cast<double>(info.intermediate_size);
  const double kd = static_cast<double>(info.linear_num_key_heads * info.linear_key_head_dim),
               vd = static_cast<double>(info.linear_num_value_heads * info.linear_value_head_dim),
               HV = static_cast<double>(info.linear_num_value_heads);
  // The lightest layer's forward GEMMs (a GDN layer's projections and the MLP), timed at kForwardFlopsPerS; what
  // the copy stream moves meanwhile beyond the layer's own input is left for one gate/up pair every k layers.
  const double flops = T * (2 * H * (2 * kd + 2 * vd + 2 * HV) + 2 * vd * H + 6 * H * I);
  const double room = flops / kForwardFlopsPerS * kHostCopyBytesPerS - 2 * T * H;
  if (room <= 0) return 0;
  const double k = std::ceil(2 * T * I * 2 / room);
  return std::max<int64_t>(2, static_cast<int64_t>(k));
}

double recompute_cost(const ModelInfo& info, int64_t tokens, int64_t checkpointed_layers, const RecomputeKeep& keep) {
  const double T = static_cast<double>(std::max<int64_t>(tokens, 1)), H = static_cast<double>(info.hidden_size);
  const double nq = static_cast<double>(info.num_attention_heads * info.head_dim),
               nkv = static_cast<double>(info.num_key_value_heads * info.head_dim);
  const double kd = static_cast<double>(info.linear_num_key_heads * info.linear_key_head_dim),
               vd = static_cast<double>(info.linear_num_value_heads * info.linear_value_head_dim),
               HV = static_cast<double>(info.linear_num_value_heads);
  const double I = static_cast<double>(info.intermediate_size), Ie = static_cast<double>(info.moe_intermediate_size),
               Is = static_cast<double>(info.shared_expert_intermediate_size),
               K = static_cast<double>(info.num_experts_per_tok), E = static_cast<double>(info.num_experts);
  // Per token: projections 2·in·out, the causal attention forward 2·T·nq (QKᵀ and PV at half density), the GDN
  // forward ~6·dk·dv per value head.
  const double attn_proj = 2 * H * (2 * nq + 2 * nkv) + 2 * nq * H, attn_core = kAttnCoreWeight * 2 * T * nq;
  const double gdn_proj = 2 * H * (2 * kd + 2 * vd + 2 * HV) + 2 * vd * H;
  const double gdn_core = kGdnCoreWeight * 6 * static_cast<double>(info.linear_key_head_dim) *
                          static_cast<double>(info.linear_value_head_dim) * HV;
  const double mlp_gu = 4 * H * I;  // dense: the recompute skips the down projection
  const double moe = 2 * H * E + K * 6 * H * Ie + 6 * H * Is;
  double per_token = 0;
  const int64_t n = checkpointed_count(info, checkpointed_layers);
  for (int64_t i = 0; i < n; ++i) {
    if (full_attention(info, i)) per_token += attn_proj + (keep.attn_core ? 0 : attn_core);
    else per_token += gdn_proj + (keep.gdn_core ? 0 : gdn_core);
    if (info.is_moe) per_token += moe;
    else if (!keep.mlp(i) && !keep.mlp_stashed(i, info.num_layers))
      per_token += mlp_gu;
  }
  return per_token * T;
}

std::optional<RecomputeKeepChoice> cheapest_recompute_keep(const ModelInfo& info, int64_t tokens,
                                                           int64_t checkpointed_layers, int64_t room_bytes,
                                                           int64_t mlp_host_every) {
  if (room_bytes < 0) return std::nullopt;
  const int64_t n = checkpointed_count(info, checkpointed_layers);
  bool has_attn = false;
  for (int64_t i = 0; i < n; ++i) has_attn |= full_attention(info, i);
  RecomputeKeepChoice best;
  bool found = false;
  for (const bool attn : {false, true}) {
    if (attn && !has_attn) continue;
    for (const int64_t every : {int64_t{0}, mlp_host_every}) {
      if (every < 0) continue;
      for (int64_t m = 0; m <= (info.is_moe ? 0 : n); ++m) {
        RecomputeKeepChoice c;
        c.keep.attn_core = attn;
        c.keep.mlp_layers = m;
        c.keep.inputs_on_host = every > 0;
        c.keep.mlp_host_every = every;
        if (every > 0 && mlp_host_layers(info, n, c.keep) == 0) break;
        c.bytes = recompute_keep_bytes(info, tokens, n, c.keep);
        if (c.bytes > room_bytes) break;  // more kept layers only add memory
        c.cost = recompute_cost(info, tokens, n, c.keep);
        if (!found || c.cost < best.cost || (c.cost == best.cost && c.bytes < best.bytes)) {
          best = c;
          found = true;
        }
      }
      if (mlp_host_every <= 0) break;
    }
  }
  best.keep.inputs_on_host = false;  // the caller's to set
  return best;  // keeping nothing always fits room_bytes >= 0
}

int64_t memory_plan_margin(int64_t free_bytes) { return std::max<int64_t>(kGiB, free_bytes / 20); }

namespace {

// The most rows of a loss chunk the backend holds (CudaBackend::linear_cross_entropy_acc), cap16 = 2^26 / V rounded
// down to 16: bf16 logits 3 × cap16, fp32 1.5 × cap16 (the Hopper policy's in-place gradient).
int64_t loss_cap_rows(const ModelInfo& info, LossLogits logits) {
  const int64_t V = std::max<int64_t>(info.vocab_size, 1), cap = (int64_t{1} << 26) / V;
  const int64_t cap16 = cap >= 32 ? cap / 16 * 16 : std::max<int64_t>(cap, 1);
  return logits == LossLogits::BF16 ? 3 * cap16 : std::max<int64_t>(1, cap16 * 3 / 2);
}

// The rows held for `chunk` rows asked: at most the cap and the step's tokens.
int64_t loss_rows_held(const ModelInfo& info, const MemoryPlanRequest& req, int64_t chunk) {
  return std::max<int64_t>(
      1, std::min({chunk, std::max<int64_t>(req.tokens_per_step, 1), loss_cap_rows(info, req.loss_logits)}));
}

// Passes over the lm_head weight a step's loss makes with `chunk` rows asked, times kLossChunkFlopsPerWeight · V·H.
double loss_chunks_cost(const ModelInfo& info, const MemoryPlanRequest& req, int64_t chunk) {
  const int64_t T = std::max<int64_t>(req.tokens_per_step, 1), rows = loss_rows_held(info, req, chunk);
  return static_cast<double>((T + rows - 1) / rows) * kLossChunkFlopsPerWeight *
         static_cast<double>(info.vocab_size) * static_cast<double>(info.hidden_size);
}

// The loss chunks the plan tries, fastest first: kLossChunkRows, and with bf16 logits also half the rows the
// backend holds in the fp32 form's bytes (3 × (2^26 / V rounded down to 16), CudaBackend::linear_cross_entropy_acc;
// 384 rows at Qwen3.5's vocabulary: half the loss buffers, ~0.6 ms a 2b step slower: loss_chunks_cost)
// where that is fewer rows than the wide chunks'.
std::vector<int64_t> loss_chunk_candidates(const ModelInfo& info, const MemoryPlanRequest& req) {
  std::vector<int64_t> c{kLossChunkRows};
  if (!req.fused_loss || req.loss_logits != LossLogits::BF16) return c;
  const int64_t narrow = std::max<int64_t>(1, loss_cap_rows(info, LossLogits::BF16) / 2);
  if (narrow < loss_rows_held(info, req, kLossChunkRows)) c.push_back(narrow);
  return c;
}

}  // namespace

MemoryPlan plan_memory(const ModelInfo& info, const MemoryPlanRequest& req) {
  check(req.free_bytes > 0, "memory plan: the GPU's free memory is unknown (" + std::to_string(req.free_bytes) +
                                " bytes); set gradient_checkpointing to true, false or a number of layers");
  MemoryPlan base;
  base.free_bytes = req.free_bytes;
  base.budget_bytes = req.free_bytes - memory_plan_margin(req.free_bytes);
  base.loss_chunk_rows = kLossChunkRows;
  base.loss_logits = req.fused_loss ? req.loss_logits : LossLogits::F32;
  const std::vector<int64_t> chunks = loss_chunk_candidates(info, req);
  const double widest_loss = loss_chunks_cost(info, req, chunks.front());
  const auto order = [](const MemoryPlan& p) { return p.recompute_cost + p.loss_cost; };
  // Checkpointing the last layer saves nothing (its backward recomputes it at once) yet the estimate counts
  // its input too, so all L layers use more memory than L-1: the fallback is the least memory tried, not L.
  MemoryPlan least, best;
  bool found = false;
  const int64_t L = info.num_layers, T = req.tokens_per_step;
  for (int64_t n = 0; n <= L; ++n) {
    // The inputs in host memory only where some are stashed (every checkpointed layer but the last one).
    const bool can_stash = req.host_offload && std::min(n, L - 1) > 0;
    std::optional<MemoryPlan> pick;
    for (const bool on_host : {false, true}) {
      if (on_host && !can_stash) continue;
      for (const int64_t chunk : chunks) {
        const VramEstimate e = estimate_vram(info, req.lora_r, req.tokens_per_step, req.fused_loss, n > 0, n,
                                             req.base_quantization, chunk, req.images, req.lora_groups, on_host,
                                             base.loss_logits);
        MemoryPlan plan = base;
        plan.loss_chunk_rows = chunk;
        plan.loss_cost = chunk == chunks.front() ? 0.0 : loss_chunks_cost(info, req, chunk) - widest_loss;
        plan.gradient_checkpointing = n > 0;
        plan.checkpoint_layers = n;
        plan.estimate = e;
        plan.keep.inputs_on_host = on_host;
        plan.host_bytes = on_host ? 2 * T * info.hidden_size * std::min(n, L - 1) : 0;
        if (least.estimate.total == 0 || e.total < least.estimate.total) least = plan;
        const std::optional<RecomputeKeepChoice> k = cheapest_recompute_keep(
            info, T, n, plan.budget_bytes - e.total, on_host ? mlp_host_spacing(info, T) : 0);
        if (!k) continue;
        plan.keep = k->keep;
        plan.keep.inputs_on_host = on_host;
        plan.host_bytes += mlp_host_layers(info, n, plan.keep) * 2 * T * info.intermediate_size * 2;
        plan.keep_bytes = k->bytes;
        plan.estimate.activations += k->bytes;
        plan.estimate.total += k->bytes;
        plan.recompute_cost = k->cost;
        plan.fits = true;
        // Host memory, and the narrower loss chunks, only when they pay.
        if (!pick || order(plan) < order(*pick)) pick = plan;
      }
    }
    if (!pick) continue;
    if (!found || order(*pick) < order(best) ||
        (order(*pick) == order(best) && pick->estimate.total < best.estimate.total)) {
      best = *pick;
      found = true;
    }
  }
  if (found) return best;
  least.recompute_cost = recompute_cost(info, T, least.checkpoint_layers, least.keep);
  return least;  // nothing fits: the least memory there is
}

std::string recompute_keep_text(const ModelInfo& info, const RecomputeKeep& keep, int64_t checkpointed_layers) {
  const int64_t n = checkpointed_count(info, checkpointed_layers);
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (keep.attn_core) add("attention core");
  if (keep.gdn_core) add("GDN core");
  const int64_t m = keep.mlp_layers < 0 ? n : std::min(keep.mlp_layers, n);
  if (!info.is_moe && m > 0)
    add(m >= n ? "MLP gate/up" : "MLP gate/up of layers 0-" + std::to_string(m - 1));
  const int64_t h = mlp_host_layers(info, checkpointed_layers, keep);
  if (h > 0)
    add("MLP gate/up of " + std::to_string(h) + " more layers in host memory (every " +
        std::to_string(keep.mlp_host_every) + " from layer " + std::to_string(keep.mlp_layers + keep.mlp_host_every - 1) +
        ")");
  return s.empty() ? "nothing" : s;
}

std::string memory_plan_text(const ModelInfo& info, const MemoryPlan& p) {
  std::string s = !p.gradient_checkpointing ? "no layers checkpointed"
                  : p.checkpoint_layers >= info.num_layers
                      ? "all " + std::to_string(info.num_layers) + " layers checkpointed"
                      : "layers 0-" + std::to_string(p.checkpoint_layers - 1) + " of " +
                            std::to_string(info.num_layers) + " checkpointed";
  if (p.gradient_checkpointing && p.keep.any())
    s += " (kept for the recompute: " + recompute_keep_text(info, p.keep, p.checkpoint_layers) + ", " +
         gib_text(p.keep_bytes) + ")";
  if (p.gradient_checkpointing && p.keep.inputs_on_host)
    s += ", their inputs in page-locked host memory (" + gib_text(p.host_bytes) + ")";
  s += ", loss chunks of " + std::to_string(p.loss_chunk_rows) + " rows" +
       (p.loss_logits == LossLogits::BF16 ? " of bf16 logits" : "") + ": expected peak " + gib_text(p.estimate.total) +
       (p.fits ? " within " : " EXCEEDS ") + gib_text(p.budget_bytes) + " (" + gib_text(p.free_bytes) + " free less a " +
       gib_text(memory_plan_margin(p.free_bytes)) + " margin)";
  return s;
}

}  // namespace deltatune
