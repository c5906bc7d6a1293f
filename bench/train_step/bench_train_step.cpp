// Training-step throughput of our engine on one GPU: a random-weight Qwen3.5 model in a public shape
// (spec §1.3: 0.8b, 2b, 9b), one packed row of --tokens tokens, LoRA r=16 on every linear group, AdamW.
// Times forward + backward + grad norm + optimizer (median of --steps after --warmup) and prints a table
// and one JSON line: tokens/s, peak VRAM (the backend allocator's peak, weights included), MFU.
//
// Data parallel: started once per GPU with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set (as by
// torchrun; bench/train_step/run_dp_step.sh does it), each worker trains its own row of --tokens tokens and the
// LoRA gradients are summed over the GPUs as in training (NCCL, buckets overlapped with the backward; --overlap 0
// sums them all after the backward). Rank 0 prints tokens/s of all GPUs together (GPUs x tokens / median step).
//
//   bench_train_step --shape 2b [--tokens 4096] [--steps 5] [--warmup 2] [--ckpt 1] [--seqs 1] [--overlap 1]
//                    [--layers N (fewer layers of the shape)] [--experts 0|1 (LoRA on MoE experts, default 1)]
//                    [--rank R (LoRA rank, default 16; alpha = 2R)]
//                    [--prompt-share F (the first F of every sequence is a masked prompt: no targets there, as
//                     chat data under train_on_inputs: false; default 0, every token trained)]
//                    [--ckpt-layers N (with --ckpt 1: checkpoint only the first N layers; -1 = all)]
//                    [--ckpt auto (gradient_checkpointing: auto, the memory plan for the GPU's free memory before
//                     the bench allocates, or for each of --free-gib X1,X2,... (e.g. another GPU's memory); several
//                     workers: planned per GPU for the layout measured, plan_multi_gpu_auto_checkpointing)]
//                    [--ckpt-sweep L1,L2,... (several settings in one process: checkpointed layers, -1 = all,
//                     0 = none; with --ckpt auto the plan is added; run in ascending predicted memory, so each
//                     row's peak, the allocator's peak so far, is that setting's)]
//                    [--keep K1/K2/... (selective recompute, StepOptions::keep: each setting above is measured with
//                     each K, a comma list of none, attn (attention core), gdn (GDN core), mlp (MLP gate/up of every
//                     checkpointed layer) or mlpN (of the first N); --ckpt auto plans use the plan's keep)]
//                    [--host-offload 1|0 (--ckpt auto: the plan may keep checkpointed layers' inputs in page-locked
//                     host memory, RecomputeKeep::inputs_on_host, as `deltatune train` on CUDA; default 1)]
//                    [--plan-only 1 (print the settings and their estimates' terms, no GPU needed)]
//                    [--graph 1|0 (the step recorded and replayed as a CUDA graph, StepOptions::record; 0: op by op)]
//                    [--kernels auto|portable (the run config's `kernels`; portable: the sm_80 kernels)]
//                    [--loss-logits fp32|bf16 (the run config's `loss_logits`: the fused loss's logits in bf16, as
//                     HF and Liger; the plan and the estimates count its buffers)]
//                    [--sharded 0|1 (data parallel: the frozen decoder layers sharded over the GPUs, ZeRO-3 style,
//                     each layer all-gathered before its forward and backward; peak_GiB then shows 1/N of them)]
//                    [--ep 0|1 (data parallel with the MoE experts split over the GPUs, expert parallel: each GPU
//                     holds E/N experts and their LoRA, token rows travel by NCCL send/recv; with --sharded 1 the
//                     rest of each layer is sharded too)]
//
// FLOPs counted (the usual convention, so numbers compare with HF's): 6·N·T for the linear layers (N =
// matmul parameters incl. lm_head; a frozen-base LoRA step skips the weight-gradient third, so this
// overstates the work by up to 1/3) + causal attention 6·T²/seqs·hd·nH per full-attention layer
// (fwd QKᵀ and PV at half density, backward twice that) + the GDN core as chunked (per token and value
// head ≈ 18·dk·dv fwd+bwd). Peak: 989 TFLOP/s (dense bf16, H100 SXM / H200).
// pred_GiB: the memory plan's estimate (estimate_vram; several workers: the layout's per-GPU estimate of
// plan_multi_gpu) less its overhead (CUDA context, kernel images: what the allocator does not see), next
// to the measured peak; the JSON line also has the estimate's terms (est_*) and the measured ones: the allocator's
// bytes after loading the weights (mem_weights), after uploading LoRA (mem_lora; its peak until then, weights and
// the adapter's setup: mem_setup_peak) and after the steps
// (mem_resident: weights, LoRA, gradients, optimizer state and whatever the step keeps between steps).
// zero_grad_ms, grad_norm_ms, optimizer_ms: the parts of step_ms outside fwd_bwd_ms (host clock, each ended by a
// synchronize; the norm's host read and the optimizer's host work included).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_kernels_setting.h"
#include "core/error.h"
#include "core/quantized.h"
#include "data/batch.h"
#include "deltatune/distributed.h"
#include "dist/data_parallel.h"
#include "lora/lora.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/optimizer.h"
#include "deltatune/gpu_info.h"
#include "deltatune/recompute_keep.h"
#include "deltatune/memory_plan.h"
#include "deltatune/shard_plan.h"
#include "../common/model_info_of.h"
#include "../common/random_qwen35.h"

using namespace deltatune;
using deltatune::bench::random_weights;
using deltatune::bench::shape_config;
using deltatune::bench::model_info_of;

namespace {

struct Flops {
  double linear = 0, attn = 0, gdn = 0;
  int64_t params = 0;
};

Flops count_flops(const ModelConfig& c, int64_t T, int64_t seqs) {
  const int64_t H = c.hidden_size;
  int64_t n = c.vocab_size * H;  // lm_head (the embedding lookup is no matmul)
  int64_t attn_layers = 0, gdn_layers = 0;
  for (LayerKind k : c.layer_types) {
    if (k == LayerKind::FullAttention) {
      n += (2 * c.num_heads * c.head_dim + 2 * c.num_kv_heads * c.head_dim) * H + H * c.num_heads * c.head_dim;
      ++attn_layers;
    } else {
      n += (c.conv_dim() + c.value_dim() + 2 * c.lin_v_heads) * H + H * c.value_dim();
      ++gdn_layers;
    }
    // MoE: the active parameters per token (top-k experts + shared expert + router).
    n += c.is_moe() ? (3 * (c.top_k * c.moe_intermediate + c.shared_intermediate) + c.num_experts + 1) * H
                    : 3 * c.intermediate_size * H;
  }
  Flops f;
  f.params = n;
  f.linear = 6.0 * double(n) * double(T);
  const double per_seq = double(T) / double(seqs);
  f.attn = double(attn_layers) * 6.0 * per_seq * per_seq * double(seqs) * double(c.head_dim) * double(c.num_heads);
  f.gdn = double(gdn_layers) * 18.0 * double(T) * double(c.lin_v_heads) * double(c.lin_k_dim) * double(c.lin_v_dim);
  return f;
}

// One --keep item: a comma list of none, attn, gdn, mlp, mlpN, host (inputs on the host), hostmlpK.
RecomputeKeep parse_keep(const std::string& v) {
  RecomputeKeep k;
  for (size_t b = 0; b <= v.size();) {
    const size_t e = std::min(v.find(',', b), v.size());
    const std::string item = v.substr(b, e - b);
    if (item == "attn") k.attn_core = true;
    else if (item == "gdn") k.gdn_core = true;
    else if (item == "host") k.inputs_on_host = true;
    else if (item.rfind("hostmlp", 0) == 0) {  // every Nth layer past the mlpM ones: gate/up in host memory
      k.inputs_on_host = true;
      k.mlp_host_every = std::atoll(item.c_str() + 7);
    }
    else if (item == "mlp") k.mlp_layers = -1;
    else if (item.rfind("mlp", 0) == 0) k.mlp_layers = std::atoll(item.c_str() + 3);
    else if (item != "none" && !item.empty()) throw Error("--keep: unknown part '" + item + "'");
    b = e + 1;
  }
  return k;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "2b";
  int64_t tokens = 4096, seqs = 1, layers = 0;
  double prompt_share = 0;
  bool experts = true;
  int64_t rank = 16, ckpt_layers = -1;
  int steps = 5, warmup = 2;
  bool ckpt = true, overlap = true, ckpt_auto = false, sharded = false, ep = false, graph = true, plan_only = false;
  std::vector<double> free_gib;
  std::vector<int64_t> sweep;
  std::vector<std::string> keeps;  // --keep items
  double peak = 989e12;
  std::string kernels = "auto";
  std::string quant = "none";  // base_quantization: none | fp8 | nf4
  std::string loss_logits_arg = "fp32";
  bool host_offload = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--shape") shape = v;
    else if (a == "--tokens") tokens = std::atoll(v.c_str());
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--ckpt" && v == "auto") ckpt_auto = true;
    else if (a == "--ckpt") ckpt = std::atoi(v.c_str()) != 0;
    else if (a == "--free-gib" || a == "--ckpt-sweep") {
      for (size_t b = 0; b <= v.size();) {
        const size_t e = std::min(v.find(',', b), v.size());
        const std::string item = v.substr(b, e - b);
        if (a == "--free-gib") free_gib.push_back(std::atof(item.c_str()));
        else sweep.push_back(std::atoll(item.c_str()));
        b = e + 1;
      }
    }
    else if (a == "--keep") {
      for (size_t b = 0; b <= v.size();) {
        const size_t e = std::min(v.find('/', b), v.size());
        keeps.push_back(v.substr(b, e - b));
        b = e + 1;
      }
    }
    else if (a == "--seqs") seqs = std::atoll(v.c_str());
    else if (a == "--prompt-share") prompt_share = std::atof(v.c_str());
    else if (a == "--peak") peak = std::atof(v.c_str());
    else if (a == "--layers") layers = std::atoll(v.c_str());
    else if (a == "--experts") experts = std::atoi(v.c_str()) != 0;
    else if (a == "--rank") rank = std::atoll(v.c_str());
    else if (a == "--ckpt-layers") ckpt_layers = std::atoll(v.c_str());
    else if (a == "--overlap") overlap = std::atoi(v.c_str()) != 0;
    else if (a == "--graph") graph = std::atoi(v.c_str()) != 0;
    else if (a == "--host-offload") host_offload = std::atoi(v.c_str()) != 0;
    else if (a == "--plan-only") plan_only = std::atoi(v.c_str()) != 0;
    else if (a == "--sharded") sharded = std::atoi(v.c_str()) != 0;
    else if (a == "--ep") ep = std::atoi(v.c_str()) != 0;
    else if (a == "--kernels") kernels = v;
    else if (a == "--quant") quant = v;
    else if (a == "--loss-logits") loss_logits_arg = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const LossLogits loss_logits = loss_logits_from_name(loss_logits_arg, "--loss-logits");
    const ModelConfig cfg = shape_config(shape, layers);
    const DistWorld world = dist_world_from_env();
    std::unique_ptr<DataParallel> dp;
    if (world.active()) dp = std::make_unique<DataParallel>(world);
    const int ranks = dp ? dp->world() : 1;
    const bool root = !dp || dp->root();
    const double t0 = now_s();
    ModelWeights w = random_weights(cfg);
    w.base_quant = quant_format_from_name(quant, "--quant");
    // The GPU's free memory before this process allocates (the plan's estimate counts the CUDA context).
    int64_t free_bytes = 0;
    {
      const int dev = dp ? worker_gpu(world, {}, visible_cuda_devices()) : 0;
      for (const GpuDevice& d : gpu_environment(kernels).devices)
        if (d.index == dev) free_bytes = d.free_bytes > 0 ? d.free_bytes : d.total_bytes;
    }

    LoraSpec spec;
    spec.r = rank;
    spec.alpha = static_cast<double>(2 * rank);
    spec.groups = lora_default_groups(cfg);
    if (cfg.is_moe() && experts) spec.groups.push_back("experts");

    // The settings measured: the plan's (--ckpt auto), the sweep's, or --ckpt/--ckpt-layers.
    struct Setting {
      std::string label;
      bool ckpt;
      int64_t layers, chunk;
      RecomputeKeep keep;
      int64_t predicted;  // bytes per GPU less the fixed overhead: estimate_vram, or the layout's per-GPU plan
      VramEstimate est;   // one GPU: estimate_vram's terms (printed beside the measured ones)
      int64_t kept = 0;   // recompute_keep_bytes (part of predicted)
    };
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const ModelInfo info = model_info_of(w);
    const std::string qname = quant_format_name(w.base_quant);
    // Several workers: the per-GPU estimate of the layout measured (deltatune/shard_plan.h).
    const WeightLayout layout = sharded ? (ep ? WeightLayout::ExpertParallelSharded : WeightLayout::Sharded)
                                : ep    ? WeightLayout::ExpertParallel
                                        : WeightLayout::Replicated;
    ShardPlanSettings ps;
    ps.lora_r = static_cast<int>(rank);
    ps.lora_groups = spec.groups;
    ps.tokens_per_step = tokens;
    ps.base_quantization = qname;
    ps.loss_logits = loss_logits;
    auto setting = [&](std::string label, bool on, int64_t n, int64_t chunk, RecomputeKeep keep = {}) {
      const int64_t kept = on ? recompute_keep_bytes(info, tokens, n, keep) : 0;
      if (dp) {
        ShardPlanSettings t = ps;
        t.gradient_checkpointing = on;
        t.checkpoint_layers = n;
        const LayoutEstimate& e =
            plan_multi_gpu(info, t, {ranks, free_bytes}).layouts[static_cast<size_t>(layout)];
        return Setting{std::move(label), on, n, chunk, keep, e.total - e.overhead + kept, {}, kept};
      }
      const VramEstimate e =
          estimate_vram(info, static_cast<int>(rank), tokens, true, on, n, qname, chunk, {}, spec.groups,
                        keep.inputs_on_host, loss_logits);
      return Setting{std::move(label), on, n, chunk, keep, e.total - e.overhead + kept, e, kept};
    };
    std::vector<Setting> settings;
    std::vector<std::pair<std::string, int64_t>> plans;  // label, free bytes
    if (ckpt_auto && free_gib.empty()) plans.emplace_back("auto", free_bytes);
    if (ckpt_auto)
      for (double g : free_gib) {
        char label[32];
        std::snprintf(label, sizeof label, "auto@%g", g);
        plans.emplace_back(label, static_cast<int64_t>(g * gib));
      }
    for (const auto& [label, free] : plans) {
      if (dp) {  // the layout and the checkpointing planned together for each GPU's share (as `deltatune train`)
        const ShardPlan plan = plan_multi_gpu_auto_checkpointing(info, ps, {ranks, free}, &layout);
        if (!plan.choice()) throw Error("--ckpt auto: " + shard_plan_text(plan));
        const bool on = plan.settings.gradient_checkpointing;
        settings.push_back(setting(label, on, on ? plan.settings.checkpoint_layers : 0, 1024, plan.settings.keep));
        if (root) std::printf("memory plan (%s):\n%s", label.c_str(), shard_plan_text(plan).c_str());
        continue;
      }
      MemoryPlanRequest req;
      req.lora_r = static_cast<int>(rank);
      req.tokens_per_step = tokens;
      req.base_quantization = qname;
      req.free_bytes = free;
      req.lora_groups = spec.groups;
      req.host_offload = host_offload;
      req.loss_logits = loss_logits;
      const MemoryPlan plan = plan_memory(info, req);
      settings.push_back(
          setting(label, plan.gradient_checkpointing, plan.checkpoint_layers, plan.loss_chunk_rows, plan.keep));
      if (root) std::printf("memory plan (%s): %s\n", label.c_str(), memory_plan_text(info, plan).c_str());
    }
    if (keeps.empty()) keeps.push_back("");
    for (const std::string& k : keeps) {  // each sweep / --ckpt setting with each --keep
      const std::string suffix = k.empty() ? "" : "+" + k;
      for (int64_t n : sweep)
        settings.push_back(setting((n < 0 ? "all" : std::to_string(n)) + suffix, n != 0, n, 1024, parse_keep(k)));
      if (sweep.empty() && (plans.empty() || !k.empty()))
        settings.push_back(
            setting((ckpt ? std::to_string(ckpt_layers) : "0") + suffix, ckpt, ckpt_layers, 1024, parse_keep(k)));
    }
    std::stable_sort(settings.begin(), settings.end(),
                     [](const Setting& a, const Setting& b) { return a.predicted < b.predicted; });
    if (plan_only) {  // the settings and their estimates alone (no GPU needed)
      for (const Setting& st : settings)
        std::printf("%-6s %-7lld %-16s pred_GiB %.3f  weights %.3f lora+opt %.3f activations %.3f (kept %.3f) "
                    "logits %.3f (%s, chunk %lld)\n",
                    shape.c_str(), static_cast<long long>(tokens), st.label.c_str(), st.predicted / gib,
                    st.est.weights / gib, st.est.lora_and_optimizer / gib, st.est.activations / gib,
                    st.kept / gib, st.est.logits / gib, loss_logits_name(loss_logits),
                    static_cast<long long>(st.chunk));
      return 0;
    }
    auto be = make_cuda_backend(dp ? worker_gpu(world, {}, visible_cuda_devices()) : 0, DType::BF16, kernels);
    if (dp) dp->connect_backend(*be);
    if (sharded && !dp) throw Error("--sharded 1 needs several workers (run_dp_step.sh)");
    if (ep && !dp) throw Error("--ep 1 needs several workers (run_dp_step.sh)");
    Qwen35Model model(w, *be, sharded ? &dp->shard_gatherer() : nullptr, ep ? &dp->token_exchange() : nullptr);
    be->synchronize();
    const double t_load = now_s() - t0;
    const int64_t mem_weights = be->memory_stats().allocated_bytes;  // measured: the frozen weights

    LoraAdapter adapter = lora_create(cfg, spec, 1);
    if (ep) dp->scatter_expert_lora(adapter);  // on the host: this GPU's experts' LoRA only reaches it
    lora_to_backend(adapter, *be);
    if (dp) {
      dp->broadcast_adapter(adapter);
      dp->attach(adapter, int64_t(25) << 20);
    }
    const int64_t mem_lora = be->memory_stats().allocated_bytes - mem_weights;  // measured: LoRA A/B
    const int64_t mem_setup_peak = be->memory_stats().peak_allocated_bytes;  // measured: the load and adapter setup

    // One packed row: `seqs` sequences of equal length, random token ids, every token trained but the prompt's.
    std::mt19937 rng(11 + (dp ? dp->rank() : 0));  // each GPU its own row
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
    std::vector<Example> ex(static_cast<size_t>(seqs));
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t len = tokens / seqs + (s < tokens % seqs ? 1 : 0);
      for (int64_t t = 0; t < len; ++t) ex[s].input_ids.push_back(tok(rng));
      ex[s].labels = ex[s].input_ids;
      const auto prompt = static_cast<int64_t>(prompt_share * static_cast<double>(len));
      for (int64_t t = 0; t < std::min(prompt, len); ++t) ex[s].labels[static_cast<size_t>(t)] = -100;
    }
    std::vector<const Example*> ptrs;
    for (auto& e : ex) ptrs.push_back(&e);
    const Batch batch = batch_from_examples(ptrs);

    OptimizerSettings os;
    StepOptions so;
    so.backward = true;
    so.grad_scale = 1.f / static_cast<float>(batch.num_targets * ranks);
    if (dp && overlap) so.on_layer_backward = [&](int layer) { dp->layer_done(layer); };
    so.fused_loss = true;
    so.loss_logits = loss_logits;
    so.record = graph;
    const Flops f = count_flops(cfg, tokens, seqs);
    if (root)
      std::printf("%-6s %-7s %-16s %-6s %-6s %-10s %-10s %-9s %-9s %-9s %-7s %-8s %s\n", "shape", "tokens", "ckpt",
                  "chunk", "logits", "step_ms", "tok/s", "peak_GiB", "pred_GiB", "resv_GiB", "MFU", "loss", "device");
    for (const Setting& st : settings) {
      so.gradient_checkpointing = st.ckpt;
      so.checkpoint_layers = st.ckpt ? st.layers : -1;
      so.loss_chunk_rows = st.chunk;
      so.keep = st.keep;
      const bool ckpt = st.ckpt;
      const int64_t ckpt_layers = so.checkpoint_layers;
      std::vector<double> times, step_times;  // whole step; zero_grad + forward + backward alone
      // Where the rest of a step goes (host clock, a synchronize after each part): zero_grad, the gradient
      // norm (its host read included), the optimizer (its host work included).
      std::vector<double> zero_times, norm_times, opt_times;
      double loss = 0;
      int replayed = 0;  // timed steps that replayed a recorded graph
      for (int s = 1; s <= warmup + steps; ++s) {
        be->synchronize();
        const double a = now_s();
        if (dp) dp->zero_gradients();
        else lora_zero_grad(adapter, *be);
        be->synchronize();
        const double z = now_s();
        const StepOutput out = model.step(batch, &adapter, so);
        be->synchronize();  // the norm below waits for the gradients anyway
        const double b = now_s();
        if (s > warmup) step_times.push_back(b - a), zero_times.push_back(z - a);
        loss = out.loss_sum / static_cast<double>(batch.num_targets);
        if (s > warmup && out.replayed) ++replayed;
        double norm = 0;
        if (dp) {  // as the trainer: summed gradients, then one host exchange (loss, rank 0's norm)
          dp->finish_gradients();
          const double mine = lora_grad_norm(adapter, *be);
          std::vector<double> v{loss / ranks, root ? mine : 0.0};
          dp->host().sum(v);
          loss = v[0];
          norm = ep ? std::sqrt(dp->expert_parallel_grad_sq(adapter, mine * mine)) : v[1];
        } else {
          norm = lora_grad_norm(adapter, *be);
        }
        be->synchronize();
        const double c = now_s();
        optimizer_step(adapter, *be, os, 1e-5, s, norm);
        be->synchronize();
        const double d = now_s();
        if (s > warmup) times.push_back(d - a), norm_times.push_back(c - b), opt_times.push_back(d - c);
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      std::sort(step_times.begin(), step_times.end());
      const double fwdbwd = step_times[step_times.size() / 2];
      const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double zero_med = median(zero_times), norm_med = median(norm_times), opt_med = median(opt_times);
      const MemoryStats ms = be->memory_stats();
      if (!root) continue;
      const double tps = static_cast<double>(tokens) * ranks / med;
      const double mfu = (f.linear + f.attn + f.gdn) / med / peak;  // per GPU
      const double pred = static_cast<double>(st.predicted) / gib;
      std::printf("%-6s %-7lld %-16s %-6lld %-6s %-10.1f %-10.0f %-9.2f %-9.2f %-9.2f %-7.3f %-8.4f %s\n",
                  shape.c_str(), static_cast<long long>(tokens), st.label.c_str(), static_cast<long long>(st.chunk),
                  loss_logits_name(loss_logits), med * 1e3, tps,
                  ms.peak_allocated_bytes / gib, pred, ms.reserved_bytes / gib, mfu, loss, be->name().c_str());
      std::printf(
          "{\"bench\":\"train_step\",\"impl\":\"deltatune\",\"shape\":\"%s\",\"layers\":%lld,\"tokens\":%lld,"
          "\"seqs\":%lld,\"prompt_share\":%.3f,"
          "\"gradient_checkpointing\":%s,\"checkpoint_layers\":%lld,\"step_ms\":%.3f,\"fwd_bwd_ms\":%.3f,"
          "\"zero_grad_ms\":%.3f,\"grad_norm_ms\":%.3f,\"optimizer_ms\":%.3f,\"tokens_per_s\":%.1f,\"peak_"
          "vram_gib\":%.3f,"
          "\"reserved_gib\":%.3f,\"mfu\":%.4f,\"flops_linear\":%.4e,\"flops_attn\":%.4e,\"flops_gdn\":%.4e,"
          "\"matmul_params\":%lld,\"lora_rank\":%lld,\"lora_experts\":%s,\"lora_params\":%lld,\"loss\":%.5f,"
          "\"load_s\":%.1f,\"device\":\"%s\","
          "\"gpus\":%d,\"overlap\":%s,\"kernels\":\"%s\",\"base_quantization\":\"%s\",\"setting\":\"%s\","
          "\"loss_chunk_rows\":%lld,\"loss_logits\":\"%s\",\"recompute_keep\":\"%s\",\"predicted_peak_gib\":%.3f,\"plan_free_gib\":%"
          ".3f,\"sharded\":%s,\"expert_parallel\":%s,\"graph\":%s,\"replayed_steps\":%d,"
          "\"mem_weights_gib\":%.4f,\"mem_lora_gib\":%.4f,\"mem_setup_peak_gib\":%.4f,\"mem_resident_gib\":%."
          "4f,\"peak_bytes\":%lld,"
          "\"est_weights_gib\":%.4f,\"est_lora_opt_gib\":%.4f,\"est_act_gib\":%.4f,\"est_keep_gib\":%.4f,"
          "\"est_logits_gib\":%.4f,\"host_stash_gib\":%.4f}\n",
          shape.c_str(), static_cast<long long>(cfg.num_layers), static_cast<long long>(tokens),
          static_cast<long long>(seqs), prompt_share, ckpt ? "true" : "false",
          static_cast<long long>(ckpt_layers), med * 1e3, fwdbwd * 1e3, zero_med * 1e3, norm_med * 1e3,
          opt_med * 1e3, tps, ms.peak_allocated_bytes / gib, ms.reserved_bytes / gib, mfu, f.linear, f.attn,
          f.gdn, static_cast<long long>(f.params), static_cast<long long>(rank), experts ? "true" : "false",
          static_cast<long long>(adapter.trainable_params()), loss, t_load, be->name().c_str(), ranks,
          overlap ? "true" : "false", kernels.c_str(), quant.c_str(), st.label.c_str(),
          static_cast<long long>(st.chunk), loss_logits_name(loss_logits),
          recompute_keep_text(info, st.keep, ckpt_layers).c_str(), pred,
          static_cast<double>(free_bytes) / gib,  // the GPU's
          sharded ? "true" : "false", ep ? "true" : "false", graph ? "true" : "false", replayed,
          mem_weights / gib, mem_lora / gib, mem_setup_peak / gib, ms.allocated_bytes / gib,
          static_cast<long long>(ms.peak_allocated_bytes), st.est.weights / gib,
          st.est.lora_and_optimizer / gib, st.est.activations / gib, st.kept / gib, st.est.logits / gib,
          static_cast<double>(model.host_stash_bytes()) / gib);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
