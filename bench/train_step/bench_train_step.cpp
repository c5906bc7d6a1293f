// Training-step throughput of our engine on one GPU: a random-weight Qwen3.5 model in a public shape
// (spec §1.3: 0.8b, 2b, 9b), one packed row of --tokens tokens, LoRA r=16 on every linear group, AdamW.
// Times forward + backward + grad norm + optimizer (median of --steps after --warmup) and prints a table
// and one JSON line: tokens/s, peak VRAM (the backend allocator's peak, weights included), MFU.
//
//   bench_train_step --shape 2b [--tokens 4096] [--steps 5] [--warmup 2] [--ckpt 1] [--seqs 1]
//                    [--layers N (fewer layers of the shape)] [--experts 0|1 (LoRA on MoE experts, default 1)]
//                    [--rank R (LoRA rank, default 16; alpha = 2R)]
//                    [--ckpt-layers N (with --ckpt 1: checkpoint only the first N layers; -1 = all)]
//
// FLOPs counted (the usual convention, so numbers compare with HF's): 6·N·T for the linear layers (N =
// matmul parameters incl. lm_head; a frozen-base LoRA step skips the weight-gradient third, so this
// overstates the work by up to 1/3) + causal attention 6·T²/seqs·hd·nH per full-attention layer
// (fwd QKᵀ and PV at half density, backward twice that) + the GDN core as chunked (per token and value
// head ≈ 18·dk·dv fwd+bwd). Peak: 989 TFLOP/s (dense bf16, H100 SXM / H200).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "data/batch.h"
#include "lora/lora.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/optimizer.h"

using namespace deltatune;

namespace {

ModelConfig shape_config(const std::string& shape, int64_t layers) {
  ModelConfig c;
  c.model_type = "qwen3_5";
  c.architecture = "Qwen3_5ForCausalLM";
  c.vocab_size = 248320;
  c.head_dim = 256;
  c.lin_k_heads = 16;
  c.lin_k_dim = c.lin_v_dim = 128;
  c.conv_kernel = 4;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  if (shape == "0.8b") {
    c.num_layers = 24, c.hidden_size = 1024, c.num_heads = 8, c.num_kv_heads = 2, c.intermediate_size = 3584;
    c.lin_v_heads = 16, c.tie_word_embeddings_flag = true;
  } else if (shape == "2b") {
    c.num_layers = 24, c.hidden_size = 2048, c.num_heads = 8, c.num_kv_heads = 2, c.intermediate_size = 6144;
    c.lin_v_heads = 16, c.tie_word_embeddings_flag = true;
  } else if (shape == "4b") {
    c.num_layers = 32, c.hidden_size = 2560, c.num_heads = 16, c.num_kv_heads = 4, c.intermediate_size = 9216;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = true;
  } else if (shape == "9b") {
    c.num_layers = 32, c.hidden_size = 4096, c.num_heads = 16, c.num_kv_heads = 4, c.intermediate_size = 12288;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = false;
  } else if (shape == "35b-a3b") {  // MoE: every layer sparse with a shared expert
    c.model_type = "qwen3_5_moe";
    c.architecture = "Qwen3_5MoeForCausalLM";
    c.num_layers = 40, c.hidden_size = 2048, c.num_heads = 16, c.num_kv_heads = 2, c.intermediate_size = 0;
    c.lin_v_heads = 32, c.tie_word_embeddings_flag = false;
    c.num_experts = 256, c.top_k = 8, c.moe_intermediate = 512, c.shared_intermediate = 512;
  } else {
    throw Error("--shape must be 0.8b, 2b, 4b, 9b or 35b-a3b, got '" + shape + "'");
  }
  if (layers > 0) c.num_layers = layers;
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  return c;
}

// Random bf16 matrices without 9B host random draws: one bank of uniform values (std 0.02, HF's
// initializer_range) as large as the largest matrix plus a margin; each matrix views it at its own offset.
struct Bank {
  Tensor t;
  int64_t n = 0, margin = 1 << 20;
  uint64_t next = 1;
  explicit Bank(int64_t largest) {
    n = largest + margin;
    t = host_tensor({n}, DType::BF16);
    uint16_t* p = t.ptr<uint16_t>();
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const float a = 0.02f * std::sqrt(3.f);
    for (int64_t i = 0; i < n; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      const float u = (static_cast<float>(s >> 40) * (1.f / 16777216.f)) * 2.f * a - a;
      uint32_t bits;
      std::memcpy(&bits, &u, 4);
      p[i] = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    }
  }
  Tensor mat(Shape s) {
    next = next * 6364136223846793005ull + 1442695040888963407ull;
    Tensor v = t;
    v.shape = std::move(s);
    v.data = static_cast<char*>(t.data) + 2 * static_cast<int64_t>((next >> 33) % static_cast<uint64_t>(margin));
    return v;
  }
};

Tensor vec(int64_t n, float lo, float hi, std::mt19937& rng) {
  Tensor t = host_tensor({n}, DType::F32);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

ModelWeights random_weights(const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  const int64_t largest = std::max({c.vocab_size * H, c.intermediate_size * H, c.conv_dim() * H,
                                    2 * c.num_heads * c.head_dim * H, c.num_experts * 2 * c.moe_intermediate * H});
  auto bank = std::make_shared<Bank>(largest);  // the views share its storage, which outlives the bank
  std::mt19937 rng(5);
  ModelWeights w;
  w.config = c;
  w.key_prefix = "model.";
  w.tied = c.tie_word_embeddings_flag;
  w.embed = bank->mat({c.vocab_size, H});
  w.lm_head = w.tied ? w.embed : bank->mat({c.vocab_size, H});
  w.final_norm = vec(H, -0.05f, 0.05f, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.kind = c.layer_types[static_cast<size_t>(i)];
    l.input_norm = vec(H, -0.05f, 0.05f, rng);
    l.post_norm = vec(H, -0.05f, 0.05f, rng);
    if (l.kind == LayerKind::FullAttention) {
      l.attn.q_proj = bank->mat({c.num_heads * c.head_dim * 2, H});
      l.attn.k_proj = bank->mat({c.num_kv_heads * c.head_dim, H});
      l.attn.v_proj = bank->mat({c.num_kv_heads * c.head_dim, H});
      l.attn.o_proj = bank->mat({H, c.num_heads * c.head_dim});
      l.attn.q_norm = vec(c.head_dim, -0.05f, 0.05f, rng);
      l.attn.k_norm = vec(c.head_dim, -0.05f, 0.05f, rng);
    } else {
      l.lin.in_proj_qkv = bank->mat({c.conv_dim(), H});
      l.lin.in_proj_z = bank->mat({c.value_dim(), H});
      l.lin.in_proj_b = bank->mat({c.lin_v_heads, H});
      l.lin.in_proj_a = bank->mat({c.lin_v_heads, H});
      l.lin.conv1d = vec(c.conv_dim() * c.conv_kernel, -0.5f, 0.5f, rng).view({c.conv_dim(), c.conv_kernel});
      l.lin.dt_bias = vec(c.lin_v_heads, 0.9f, 1.1f, rng);
      Tensor a = vec(c.lin_v_heads, 1.f, 16.f, rng);
      for (int64_t j = 0; j < c.lin_v_heads; ++j) a.ptr<float>()[j] = std::log(a.ptr<float>()[j]);
      l.lin.A_log = a;
      l.lin.norm = vec(c.lin_v_dim, 0.95f, 1.05f, rng);
      l.lin.out_proj = bank->mat({H, c.value_dim()});
    }
    if (c.is_moe()) {
      l.moe.router = bank->mat({c.num_experts, H});
      l.moe.gate_up = bank->mat({c.num_experts, 2 * c.moe_intermediate, H});
      l.moe.down = bank->mat({c.num_experts, H, c.moe_intermediate});
      l.moe.shared.gate_proj = bank->mat({c.shared_intermediate, H});
      l.moe.shared.up_proj = bank->mat({c.shared_intermediate, H});
      l.moe.shared.down_proj = bank->mat({H, c.shared_intermediate});
      l.moe.shared_gate = bank->mat({1, H});
    } else {
      l.mlp.gate_proj = bank->mat({c.intermediate_size, H});
      l.mlp.up_proj = bank->mat({c.intermediate_size, H});
      l.mlp.down_proj = bank->mat({H, c.intermediate_size});
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

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

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "2b";
  int64_t tokens = 4096, seqs = 1, layers = 0;
  bool experts = true;
  int64_t rank = 16, ckpt_layers = -1;
  int steps = 5, warmup = 2;
  bool ckpt = true;
  double peak = 989e12;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--shape") shape = v;
    else if (a == "--tokens") tokens = std::atoll(v.c_str());
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--ckpt") ckpt = std::atoi(v.c_str()) != 0;
    else if (a == "--seqs") seqs = std::atoll(v.c_str());
    else if (a == "--peak") peak = std::atof(v.c_str());
    else if (a == "--layers") layers = std::atoll(v.c_str());
    else if (a == "--experts") experts = std::atoi(v.c_str()) != 0;
    else if (a == "--rank") rank = std::atoll(v.c_str());
    else if (a == "--ckpt-layers") ckpt_layers = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const ModelConfig cfg = shape_config(shape, layers);
    const double t0 = now_s();
    ModelWeights w = random_weights(cfg);
    auto be = make_cuda_backend();
    Qwen35Model model(w, *be);
    be->synchronize();
    const double t_load = now_s() - t0;

    LoraSpec spec;
    spec.r = rank;
    spec.alpha = static_cast<double>(2 * rank);
    spec.groups = lora_default_groups(cfg);
    if (cfg.is_moe() && experts) spec.groups.push_back("experts");
    LoraAdapter adapter = lora_create(cfg, spec, 1);
    lora_to_backend(adapter, *be);

    // One packed row: `seqs` sequences of equal length, random token ids, every token trained.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
    std::vector<Example> ex(static_cast<size_t>(seqs));
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t len = tokens / seqs + (s < tokens % seqs ? 1 : 0);
      for (int64_t t = 0; t < len; ++t) ex[s].input_ids.push_back(tok(rng));
      ex[s].labels = ex[s].input_ids;
    }
    std::vector<const Example*> ptrs;
    for (auto& e : ex) ptrs.push_back(&e);
    const Batch batch = batch_from_examples(ptrs);

    OptimizerSettings os;
    StepOptions so;
    so.backward = true;
    so.grad_scale = 1.f / static_cast<float>(batch.num_targets);
    so.gradient_checkpointing = ckpt;
    so.checkpoint_layers = ckpt_layers;
    so.fused_loss = true;
    std::vector<double> times;
    double loss = 0;
    for (int s = 1; s <= warmup + steps; ++s) {
      be->synchronize();
      const double a = now_s();
      lora_zero_grad(adapter, *be);
      loss = model.step(batch, &adapter, so).loss_sum / static_cast<double>(batch.num_targets);
      optimizer_step(adapter, *be, os, 1e-5, s, lora_grad_norm(adapter, *be));
      be->synchronize();
      if (s > warmup) times.push_back(now_s() - a);
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    const MemoryStats ms = be->memory_stats();
    const Flops f = count_flops(cfg, tokens, seqs);
    const double tps = static_cast<double>(tokens) / med;
    const double mfu = (f.linear + f.attn + f.gdn) / med / peak;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("%-6s %-7s %-5s %-10s %-10s %-9s %-9s %-7s %-8s %s\n", "shape", "tokens", "ckpt", "step_ms", "tok/s",
                "peak_GiB", "resv_GiB", "MFU", "loss", "device");
    std::printf("%-6s %-7lld %-5d %-10.1f %-10.0f %-9.2f %-9.2f %-7.3f %-8.4f %s\n", shape.c_str(),
                static_cast<long long>(tokens), int(ckpt), med * 1e3, tps, ms.peak_allocated_bytes / gib,
                ms.reserved_bytes / gib, mfu, loss, be->name().c_str());
    std::printf(
        "{\"bench\":\"train_step\",\"impl\":\"deltatune\",\"shape\":\"%s\",\"layers\":%lld,\"tokens\":%lld,\"seqs\":%lld,"
        "\"gradient_checkpointing\":%s,\"checkpoint_layers\":%lld,\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"peak_vram_gib\":%.3f,"
        "\"reserved_gib\":%.3f,\"mfu\":%.4f,\"flops_linear\":%.4e,\"flops_attn\":%.4e,\"flops_gdn\":%.4e,"
        "\"matmul_params\":%lld,\"lora_rank\":%lld,\"lora_experts\":%s,\"lora_params\":%lld,\"loss\":%.5f,\"load_s\":%.1f,\"device\":\"%s\"}\n",
        shape.c_str(), static_cast<long long>(cfg.num_layers), static_cast<long long>(tokens),
        static_cast<long long>(seqs), ckpt ? "true" : "false", static_cast<long long>(ckpt_layers), med * 1e3,
        tps, ms.peak_allocated_bytes / gib, ms.reserved_bytes / gib, mfu, f.linear, f.attn, f.gdn,
        static_cast<long long>(f.params), static_cast<long long>(rank), experts ? "true" : "false",
        static_cast<long long>(adapter.trainable_params()), loss, t_load,
        be->name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
