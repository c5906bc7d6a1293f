// ModelInfo: config.json + safetensors headers + tokenizer files, no weight data touched (the reader maps
// the files but only the header pages are read). Problems that would stop a run (missing tensors, wrong
// shapes) are listed as warnings here so the studio can show all of them at once; model_weights_load
// turns them into errors.
#include "deltatune/model_info.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/model_config.h"
#include "model/model_info_shapes.h"
#include "model/model_info_vision.h"
#include "model/weights.h"

namespace deltatune {

namespace {

namespace fs = std::filesystem;

// Lists the first few items of a problem and how many more there are (warnings stay readable).
void add_listed_warning(std::vector<std::string>* warnings, const std::string& what,
                        const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::string msg = what + ": " + items[0];
  const size_t shown = std::min<size_t>(items.size(), 3);
  for (size_t i = 1; i < shown; ++i) msg += ", " + items[i];
  if (items.size() > shown) msg += " (and " + std::to_string(items.size() - shown) + " more)";
  warnings->push_back(msg);
}

bool has_chat_template(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "chat_template.jinja", ec)) return true;
  const fs::path tc = dir / "tokenizer_config.json";
  if (!fs::exists(tc, ec)) return false;
  try {
    const auto j = nlohmann::json::parse(read_text_file(tc.string()));
    if (!j.is_object() || !j.contains("chat_template")) return false;
    const auto& t = j["chat_template"];
    return (t.is_string() && !t.get<std::string>().empty()) || (t.is_array() && !t.empty());
  } catch (const nlohmann::json::exception&) {
    return false;  // an unreadable tokenizer_config.json is reported by the tokenizer loader
  }
}

}  // namespace

ModelInfo model_info_load(const std::string& dir) {
  const fs::path d(dir);
  const ModelConfig c = model_config_load((d / "config.json").string());
  const CheckpointReader reader(dir);

  ModelInfo info;
  info.dir = dir;
  model_info_fill_shapes(c, &info);

  const std::string prefix = model_key_prefix(reader);
  info.vision_language_layout = prefix == "model.language_model." || prefix == "language_model.";
  info.tied_embeddings = !reader.has("lm_head.weight");
  const bool per_expert = c.is_moe() && model_experts_per_expert(reader, prefix);

  std::map<std::string, std::string> group_of;
  std::vector<std::string> missing, mismatched, unknown;
  for (const ExpectedTensor& e : model_expected_tensors(c, prefix, per_expert)) {
    group_of[e.key] = e.group;
    if (!reader.has(e.key))
      missing.push_back(e.key);
    else if (reader.entry(e.key).shape != e.shape)
      mismatched.push_back(e.key + " " + shape_str(reader.entry(e.key).shape) + " (expected " +
                           shape_str(e.shape) + ")");
  }
  group_of["lm_head.weight"] = "lm_head";
  for (const std::string& name : reader.names()) {
    if (model_key_skipped(name)) {
      ++info.skipped_tensors;
      continue;
    }
    const std::string scale_suffix = "_scale_inv";  // FP8 checkpoints: block scales of a listed matrix
    const bool fp8 = c.quant_method == "fp8";
    if (fp8 && name.size() > scale_suffix.size() &&
        name.compare(name.size() - scale_suffix.size(), scale_suffix.size(), scale_suffix) == 0 &&
        group_of.count(name.substr(0, name.size() - scale_suffix.size())))
      continue;
    const TensorEntry& e = reader.entry(name);
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    auto g = group_of.find(name);
    if (g == group_of.end()) unknown.push_back(name);
    info.params_per_group[g == group_of.end() ? "other" : g->second] += n;
    info.total_params += n;
    // F8_E4M3 is read as its bytes (U8): an FP8 checkpoint's matrices are named by the stored type.
    ++info.dtype_counts[fp8 && e.dtype == DType::U8 && reader.has(name + scale_suffix) ? "F8_E4M3" : dtype_name(e.dtype)];
  }
  add_listed_warning(&info.warnings, "missing tensors (training will refuse this checkpoint)", missing);
  add_listed_warning(&info.warnings, "tensors with unexpected shapes", mismatched);
  if (!c.defaulted.empty()) info.warnings.push_back(model_config_defaults_note(c));
  add_listed_warning(&info.warnings, "unknown text tensors (training will refuse this checkpoint)", unknown);
  if (info.tied_embeddings != c.tie_word_embeddings_flag)
    info.warnings.push_back(std::string("config.json says tie_word_embeddings = ") +
                            (c.tie_word_embeddings_flag ? "true" : "false") + " but the checkpoint " +
                            (info.tied_embeddings ? "has no" : "has an") +
                            " lm_head.weight; the checkpoint is followed");

  model_info_fill_vision(dir, &reader, &info);

  std::error_code ec;
  info.has_tokenizer = fs::exists(d / "tokenizer.json", ec);
  info.has_chat_template = has_chat_template(d);
  if (!info.has_tokenizer) info.warnings.push_back("no tokenizer.json: only pre-tokenized data can be used");
  if (!info.has_chat_template)
    info.warnings.push_back(
        "no chat template (tokenizer_config.json \"chat_template\" or chat_template.jinja): "
        "chat datasets cannot be rendered");

  return info;
}

// A LoRA pair on a Linear(in -> out) has r*in (A) + out*r (B) parameters. A 3-D expert parameter
// (E, d1, d2) gets A (r*E, in) and B (out, r*E) (PEFT >= 0.19.1 layout, spec peft-adapter §6.2), i.e.
// r*E*(in + out). shared_expert_gate (Linear H -> 1) is not a LoRA target.
std::map<std::string, int64_t> lora_params_per_group(const ModelInfo& info, int r) {
  const int64_t R = r, H = info.hidden_size;
  const int64_t nq = info.num_attention_heads * info.head_dim, nkv = info.num_key_value_heads * info.head_dim;
  const int64_t kd = info.linear_num_key_heads * info.linear_key_head_dim;
  const int64_t vd = info.linear_num_value_heads * info.linear_value_head_dim;
  const int64_t HV = info.linear_num_value_heads;
  auto pair = [&](int64_t in, int64_t out) { return R * (in + out); };
  int64_t full = 0, lin = 0;
  for (const auto& t : info.layer_types) (t == "full_attention" ? full : lin) += 1;

  std::map<std::string, int64_t> out;
  if (full > 0) out["attn"] = full * (pair(H, 2 * nq) + 2 * pair(H, nkv) + pair(nq, H));
  if (lin > 0)
    out["linear_attn"] = lin * (pair(H, 2 * kd + vd) + pair(H, vd) + 2 * pair(H, HV) + pair(vd, H));
  const int64_t L = info.num_layers;
  if (info.is_moe) {
    const int64_t Is = info.shared_expert_intermediate_size, Ie = info.moe_intermediate_size,
                  E = info.num_experts;
    if (Is > 0) out["shared_expert"] = L * (2 * pair(H, Is) + pair(Is, H));  // 0: no shared expert
    out["experts"] = L * (R * E * (H + 2 * Ie) + R * E * (Ie + H));
  } else {
    out["mlp"] = L * (2 * pair(H, info.intermediate_size) + pair(info.intermediate_size, H));
  }
  // The tower's blocks: attn.qkv (h -> 3h), attn.proj (h -> h), mlp.linear_fc1 (h -> I), mlp.linear_fc2 (I -> h).
  const VisionTowerInfo& vt = info.vision;
  if (vt.present)
    out["vision"] = vt.depth * (pair(vt.hidden, 3 * vt.hidden) + pair(vt.hidden, vt.hidden) +
                                pair(vt.hidden, vt.intermediate) + pair(vt.intermediate, vt.hidden));
  return out;
}

bool lora_group_is_default(const std::string& group) {
  return group != "experts" && group != "vision";
}

std::vector<std::string> lora_default_groups(const ModelInfo& info) {
  std::vector<std::string> g;
  for (const auto& name : info.lora_groups)
    if (lora_group_is_default(name)) g.push_back(name);
  return g;
}

namespace {

// The scratch of the block-scaled FP8 GEMMs (sm_90, backend/cuda/cuda_quant.cpp) at its largest: the backward
// of modules that share an input transposes their FP8 weights side by side (Σ rows x in bytes) and quantizes
// their output gradients into one operand (T x Σ rows bytes, + 4 bytes per 128 values); the first step also
// times cuBLASLt's algorithms of each shape on a bf16 output scratch (T x in x 2 bytes).
int64_t fp8_gemm_scratch(const ModelInfo& info, int64_t T) {
  const int64_t H = info.hidden_size, I = info.intermediate_size, Is = info.shared_expert_intermediate_size;
  const int64_t nq = info.num_attention_heads * info.head_dim, nkv = info.num_key_value_heads * info.head_dim;
  const int64_t kd = info.linear_num_key_heads * info.linear_key_head_dim;
  const int64_t vd = info.linear_num_value_heads * info.linear_value_head_dim;
  const std::pair<int64_t, int64_t> groups[] = {  // {Σ rows, in}
      {2 * I, H}, {H, I}, {2 * Is, H}, {H, Is}, {2 * nq + 2 * nkv, H}, {H, nq}, {2 * kd + 2 * vd, H}, {H, vd}};
  int64_t bwd = 0, in = 0;
  for (const auto& [rows, cols] : groups) {
    if (rows == 0 || cols == 0) continue;
    bwd = std::max(bwd, rows * cols + T * rows + T * rows / 32);
    in = std::max(in, cols);
  }
  return bwd + 2 * T * in;
}

}  // namespace

// The fused loss's fp32 logits buffer at its largest (CudaBackend::linear_cross_entropy_acc).
constexpr int64_t kLossLogitFloats = int64_t{1} << 26;
// A checkpointed layer's recompute and backward hold this many times the layer's activations (its recomputed
// activations plus the backward's gradients and scratch). Fitted to the allocator's peaks on an H200 (4096 and
// 8192 tokens, r=16 on every group, every layer checkpointed, bench_train_step, session 29 plan30): 1.82 at 2b,
// 1.80-1.85 at 9b, 1.76 at 35B-A3B (4 layers); rounded up.
constexpr double kRecomputeWorkingSet = 1.85;
// The backend's own buffers the allocator holds from the start (cuBLAS workspace 32 MiB, the step's fixed
// buffers): measured 39-52 MiB above the weights and LoRA state (same runs).
constexpr int64_t kBackendBuffers = int64_t{56} << 20;
// Activations / this: the caching allocator's slack on the activations (see estimate_vram).
constexpr int64_t kAllocatorSlackDiv = 256;

// Peak-memory model of one training step on the GPU backend (bytes): the allocator's peak plus a fixed overhead.
// Fitted to measured peaks and a little pessimistic (PERF_NOTES session 29, plan30: within +0.01..+0.06 GiB of
// the allocator's peak at 2b, 9b and 35B-A3B); it is for choosing settings, not for allocation.
//   weights      = total_params * 2                 base weights in bf16 (fp32 norm/A_log copies: negligible),
//                                                   less an untied embedding table (kept in host memory)
//   lora_kcat_pad                                   the mixer inputs' padding for the K-concatenated LoRA
//                                                   products (bf16 base, r a multiple of 8: (i+1)·r columns),
//                                                   + 2 MiB per 256 MiB batch of padded matrices (rounding)
//   backend_buffers  56 MiB                         the backend's own buffers (cuBLAS workspace, step buffers)
//   lora         = P_lora * 16                      fp32 weight + gradient + Adam m + v, P_lora over the
//                                                   targeted groups (lora_groups; empty:
//                                                   lora_default_groups(info)), `vision` included
//   activations  saved for backward, bf16 (2 bytes per element), T = tokens_per_step:
//                  per token and layer: 4H (layer input, normed input, mid residual, normed mid) +
//                  GDN layer:  2*conv_dim (projection, conv+SiLU) + 3*value_dim (z, core out, gated norm)
//                              + 6*HV (a, b, fp32 beta/g)
//                  attention:  5*nH*hd (q+gate, roped q, attention out, gated out) + 3*nKV*hd (k, v, roped k)
//                              + 2*nH (fp32 logsumexp)
//                  dense MLP:  3*I (gate, up, silu(gate)*up)
//                  MoE:        2E (fp32 router logits) + 10*top_k (int32/fp32 routing: expert ids and weights
//                              per token, 3 dispatch maps per routed row) + top_k*(2H + 3*Ie) (permuted input,
//                              gate, up, act, expert output) + 3*Is + H + 2 (shared expert: gate, up, act, its
//                              output, gate logit and sigmoid)
//                  + r per LoRA-adapted linear of the default groups (the low-rank intermediate)
//                  + top_k*4r with expert LoRA (fp32 gate_up and down intermediates of each routed row)
//                the first N layers checkpointed (N = L with checkpoint_layers -1, 0 without checkpointing) keep
//                only their input (T * 2 * N*H; inputs_on_host: those of layers < L-1 in host memory, and at most
//                two on the device in a recompute); the peak is the larger of two moments:
//                  at the loss:      the inputs + T * 2 * (the other layers' sum) + the loss buffers (below)
//                  in a recompute:   the inputs + 1.85 * T * 2 * (the largest checkpointed layer): its recomputed
//                                    activations with its backward's gradients and scratch (kRecomputeWorkingSet,
//                                    fitted); the backward frees the kept layers before the first recompute
//                plus, through the whole step, T * 2 * 3H (final hidden state, its norm's input, dh; 4H with an
//                untied embedding table: the embedded rows uploaded from the host) and the bf16 copies of the
//                LoRA factors (2 * P_lora less the experts'); all of it + 1/256 (the caching allocator's slack:
//                a cached block up to 1/8 larger may serve a request).
//   logits       the loss buffers when the peak is at the loss, else 0 (freed before the backward):
//                fused loss: min(T, loss_chunk_rows, 2^26 / V rounded down to 16) rows of fp32 logits and their
//                bf16 gradient, rows * V * 6 (256 rows, 0.36 GiB at V = 248320); with bf16 logits
//                min(T, loss_chunk_rows, 3x that cap) rows of bf16 logits, the gradient over them, rows * V * 2
//                (768 rows at V = 248320: the same 0.36 GiB; 384 rows: 0.18 GiB);
//                unfused:    fp32 logits [T x V] and their fp32 gradient, 8*T*V.
//   overhead     512 MiB: CUDA context and kernel images (outside the allocator; the allocator's cache above
//                its peak is left to the plan's margin).
//   vision       image rows only (images.image_tokens_per_step > 0), P = image tokens * merge² patches, h/I the
//                tower's hidden/intermediate size: its weights in bf16 (2 bytes per visual.* parameter); the
//                patches' fp32 pixel values (P * C*T*p*p * 4); bf16 activations: frozen, one block at a time
//                (P * 2 * (h + 3h + h + I): input, qkv, attention out, fc1); with the `vision` LoRA group every
//                block keeps P * 2 * (9h + 2I + 4r) (2 norms' in/out, qkv, attention out, fc1 and its activation,
//                the LoRA intermediates) and the merger P * 2 * 3h. The group's LoRA pairs are in `lora` above
//                (lora_params_per_group's `vision`). Attention scores are not kept (flash-style attention).
//                The text side already counts image tokens: they are part of tokens_per_step.
VramEstimate estimate_vram(const ModelInfo& info, int lora_r, int64_t tokens_per_step, bool fused_loss,
                           bool gradient_checkpointing, int64_t checkpoint_layers, const std::string& base_quantization,
                           int64_t loss_chunk_rows, const ImageLoad& images,
                           const std::vector<std::string>& lora_groups, bool inputs_on_host, LossLogits loss_logits) {
  VramEstimate v;
  const int64_t T = std::max<int64_t>(tokens_per_step, 1), H = info.hidden_size;
  v.weights = info.total_params * 2;
  if (base_quantization == "fp8" || base_quantization == "nf4") {
    int64_t quantized = 0;
    for (const char* g : {"attn", "linear_attn", "mlp", "shared_expert", "experts"}) {
      const auto it = info.params_per_group.find(g);
      if (it != info.params_per_group.end()) quantized += it->second;
    }
    // Bytes per value: fp8 1 + 4/(128*128); nf4 1/2 + 1/64 + 4/(64*256).
    const double per = base_quantization == "fp8" ? 1.0 + 4.0 / (128 * 128) : 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
    const int64_t largest = std::max(
        {info.intermediate_size * H, info.shared_expert_intermediate_size * H,
         2 * info.num_attention_heads * info.head_dim * H,
         (2 * info.linear_num_key_heads * info.linear_key_head_dim +
          info.linear_num_value_heads * info.linear_value_head_dim) * H,
         info.num_experts * 2 * info.moe_intermediate_size * H});  // one layer's stacked experts
    int64_t scratch = 2 * largest;  // the bf16 copy dequantized before a GEMM (nf4; fp8 without FP8 GEMMs; experts)
    if (base_quantization == "fp8") scratch = std::max(scratch, fp8_gemm_scratch(info, T));
    v.weights += static_cast<int64_t>(static_cast<double>(quantized) * (per - 2.0)) + scratch;
  } else {
    check(base_quantization == "none", "estimate_vram: base_quantization '" + base_quantization +
                                           "' (expected none, fp8 or nf4)");
  }
  // An untied embedding table stays on the host (model/qwen35_model.h); a tied one is the lm_head too.
  const auto embed = info.params_per_group.find("embed");
  if (!info.tied_embeddings && embed != info.params_per_group.end()) v.weights -= 2 * embed->second;
  const auto targeted = [&](const std::string& g) {
    return lora_groups.empty() ? lora_group_is_default(g)
                               : std::find(lora_groups.begin(), lora_groups.end(), g) != lora_groups.end();
  };
  // The mixer inputs' bf16 matrices padded for the K-concatenated LoRA products (model/lora_linear.h): member i
  // of a group (attention q, k, v; GDN in_proj qkv, z, b, a) gets (i + 1)·r columns.
  if (base_quantization == "none" && lora_r > 0 && lora_r % 8 == 0 && H % 8 == 0) {
    const int64_t R = lora_r;
    const int64_t nq = info.num_attention_heads * info.head_dim, nkv = info.num_key_value_heads * info.head_dim;
    const int64_t conv = 2 * info.linear_num_key_heads * info.linear_key_head_dim +
                         info.linear_num_value_heads * info.linear_value_head_dim;
    const int64_t vd = info.linear_num_value_heads * info.linear_value_head_dim, HV = info.linear_num_value_heads;
    int64_t padded = 0;  // bytes of the padded matrices: batches of up to 256 MiB share an allocation
    for (const auto& t : info.layer_types) {
      if (t == "full_attention" && targeted("attn")) {
        v.lora_kcat_pad += 2 * R * (2 * nq + 2 * nkv + 3 * nkv);
        padded += 2 * H * (2 * nq + 2 * nkv);
      } else if (t != "full_attention" && targeted("linear_attn")) {
        v.lora_kcat_pad += 2 * R * (conv + 2 * vd + 3 * HV + 4 * HV);
        padded += 2 * H * (conv + vd + 2 * HV);
      }
    }
    // Each allocation rounds up to the allocator's 2 MiB.
    const int64_t batch = int64_t{256} << 20;
    if (v.lora_kcat_pad > 0) v.lora_kcat_pad += ((padded + v.lora_kcat_pad + batch - 1) / batch) * (int64_t{2} << 20);
  }
  int64_t lora = 0;
  for (const auto& [g, n] : lora_params_per_group(info, lora_r))
    if (targeted(g)) lora += n;
  v.lora_and_optimizer = lora * 16;
  int64_t lora_copied = 0;  // LoRA parameters the step copies to bf16 (all but the experts')
  for (const auto& [g, n] : lora_params_per_group(info, lora_r))
    if (targeted(g) && g != "experts") lora_copied += n;
  const bool expert_lora = info.is_moe && targeted("experts");

  const int64_t kd = info.linear_num_key_heads * info.linear_key_head_dim;
  const int64_t vd = info.linear_num_value_heads * info.linear_value_head_dim;
  const int64_t conv = 2 * kd + vd, HV = info.linear_num_value_heads;
  const int64_t nq = info.num_attention_heads * info.head_dim, nkv = info.num_key_value_heads * info.head_dim;
  const int64_t r = lora_r;
  const int64_t K = info.num_experts_per_tok, Ie = info.moe_intermediate_size, Is = info.shared_expert_intermediate_size;
  const int64_t mlp = info.is_moe ? 2 * info.num_experts + 10 * K + K * (2 * H + 3 * Ie) +
                                        (Is > 0 ? 3 * Is + H + 2 : 0) + 3 * r + (expert_lora ? K * 4 * r : 0)
                                  : 3 * info.intermediate_size + 3 * r;
  const int64_t lin_layer = 4 * H + 2 * conv + 3 * vd + 6 * HV + 5 * r + mlp;
  const int64_t full_layer = 4 * H + 5 * nq + 3 * nkv + 2 * info.num_attention_heads + 4 * r + mlp;
  // Checkpointed layers keep their input; the others (the last ones) keep everything.
  const int64_t L = info.num_layers;
  const int64_t n_ckpt = !gradient_checkpointing ? 0
                         : checkpoint_layers < 0 ? L
                                                 : std::min<int64_t>(checkpoint_layers, L);
  int64_t kept = 0, largest = 0;
  for (size_t i = 0; i < info.layer_types.size(); ++i) {
    const int64_t e = info.layer_types[i] == "full_attention" ? full_layer : lin_layer;
    if (static_cast<int64_t>(i) < n_ckpt)
      largest = std::max(largest, e);
    else
      kept += e;
  }
  // The fused loss's buffers (CudaBackend::linear_cross_entropy_acc): fp32 logits of at most 2^26 floats, rows a
  // multiple of 16 (256 rows at Qwen3.5's vocabulary whatever loss_chunk_rows asks for more), and their bf16
  // gradient. Under the Hopper policy the gradient is written over the logits and the same bytes hold 1.5 times
  // the rows (384 at Qwen3.5's vocabulary; fewer bytes where T is below that): this bound holds for both. bf16
  // logits: rows of 2 bytes a value (the gradient written over them), up to 3 times the cap in the same bytes.
  const int64_t V = std::max<int64_t>(info.vocab_size, 1);
  int64_t loss_buffers = 8 * T * V;
  if (fused_loss) {
    const int64_t cap = kLossLogitFloats / V;
    const int64_t cap_rows = cap >= 32 ? cap / 16 * 16 : std::max<int64_t>(cap, 1);
    const bool bf16 = loss_logits == LossLogits::BF16;
    const int64_t rows =
        std::max<int64_t>(1, std::min({std::max<int64_t>(loss_chunk_rows, 1), T, bf16 ? 3 * cap_rows : cap_rows}));
    loss_buffers = rows * V * (bf16 ? 2 : 4 + 2);
  }
  // Held through the whole step: the final hidden state, its norm's input and dh (bf16 [T, H] each; with an
  // untied embedding table also the embedded rows uploaded from the host), and the bf16 compute copies of the
  // LoRA factors (expert LoRA is used as stored).
  const int64_t step_fixed = (3 + (info.tied_embeddings ? 0 : 1)) * 2 * T * H + 2 * lora_copied;
  // Layer inputs on the device at the loss and in a recompute: every checkpointed layer's, or with inputs_on_host
  // the last layer's when it is checkpointed (never stashed) at the loss and two in a recompute (the layer's own
  // and the one below coming back).
  const int64_t stashed = inputs_on_host ? std::max<int64_t>(0, std::min(n_ckpt, L - 1)) : 0;
  const int64_t inputs = 2 * T * (n_ckpt - stashed) * H;
  const int64_t inputs_recompute = inputs_on_host ? 2 * T * std::min<int64_t>(n_ckpt, 2) * H : inputs;
  // The step's peak is at one of two moments: the loss (the layer inputs, every kept layer's activations, the loss
  // buffers) or a checkpointed layer's backward (the inputs of the layers below, the recomputed layer's
  // activations and its backward's gradients and scratch: kRecomputeWorkingSet x its activations; the backward
  // frees the kept layers before the first recompute). A kept layer's backward holds less than the loss
  // (measured: the no-checkpointing peaks are the loss's).
  const int64_t at_loss = inputs + 2 * T * kept + loss_buffers;
  const int64_t at_recompute =
      n_ckpt == 0 ? 0
                  : inputs_recompute +
                        static_cast<int64_t>(kRecomputeWorkingSet * static_cast<double>(2 * T * largest));
  if (at_loss >= at_recompute) {
    v.logits = loss_buffers;
    v.activations = at_loss - loss_buffers + step_fixed;
  } else {
    v.logits = 0;  // freed before the backward
    v.activations = at_recompute + step_fixed;
  }
  // The caching allocator may serve a request from a cached block up to 1/8 larger (DeviceAllocator::fits):
  // measured up to 0.35% above the activations counted here (2b, 8192 tokens, nothing checkpointed).
  v.activations += v.activations / kAllocatorSlackDiv;
  v.backend_buffers = kBackendBuffers;
  v.overhead = int64_t{512} << 20;
  const VisionTowerInfo& vt = info.vision;
  if (vt.present && images.image_tokens_per_step > 0) {
    const int64_t P = images.image_tokens_per_step * vt.patches_per_token(), h = vt.hidden, I = vt.intermediate;
    const int64_t features = 3 * vt.temporal_patch_size * vt.patch_size * vt.patch_size;
    v.vision_weights = vt.params * 2;
    v.vision_activations = P * features * 4;
    if (targeted("vision")) {
      v.vision_activations += 2 * P * (vt.depth * (9 * h + 2 * I + 4 * r) + 3 * h);
    } else {
      v.vision_activations += 2 * P * (h + 3 * h + h + I);
    }
  }
  v.total = v.weights + v.lora_and_optimizer + v.activations + v.logits + v.overhead + v.backend_buffers +
            v.vision_weights + v.vision_activations + v.lora_kcat_pad;
  return v;
}

}  // namespace deltatune
