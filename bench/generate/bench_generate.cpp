// Generation speed of our engine on one GPU: a random-weight Qwen3.5 model in a public shape (0.8b, 2b, 9b),
// --batch prompts of --prompt random tokens each, greedy, --new tokens each (end tokens ignored). Measures the
// time to first token (prefill of the whole batch + the first sampling, from the call) and the decode speed
// (batch x (new - 1) tokens over the time from the first token to the last), median of --runs after a warm-up,
// and prints a table row and one JSON line.
//
//   bench_generate --shape 0.8b [--batches 1,8] [--prompt 1024] [--new 128] [--runs 3] [--lora 0|1 (r=16 on every
//                  linear group, applied unmerged)] [--graphs 0|1 (the decode step as a CUDA graph, default 1)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../common/random_qwen35.h"
#include "backend/backend.h"
#include "core/error.h"
#include "decode/decode_loop.h"
#include "lora/lora.h"
#include "model/lora_linear.h"
#include "model/qwen35_model.h"

using namespace deltatune;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Timing {
  double ttft = 0, decode_tok_s = 0;
};

Timing run_once(Qwen35Model& model, LoraAdapter* lora, int64_t batch, int64_t prompt, int64_t new_tokens,
                uint64_t seed, bool graphs) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model.config().vocab_size - 1));
  std::vector<DecodeSequence> seqs(static_cast<size_t>(batch));
  std::vector<DecodeSequence*> ptrs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].request = i;
    for (int64_t t = 0; t < prompt; ++t) seqs[i].prompt.push_back(tok(rng));
    seqs[i].sampling.max_new_tokens = new_tokens;
    seqs[i].sampling.ignore_eos = true;
    ptrs.push_back(&seqs[i]);
  }
  const std::set<int32_t> no_end;
  double t_first = 0, t_last = 0;
  const double t0 = now_s();
  DecodeContext ctx{model, lora, nullptr, no_end};
  ctx.record_step = graphs;
  run_decode(ctx, ptrs,
             [&](const GenerateEvent& e) {
               const double t = now_s();
               if (t_first == 0) t_first = t;
               t_last = t;
             },
             nullptr);
  Timing r;
  r.ttft = t_first - t0;
  r.decode_tok_s = double(batch) * double(new_tokens - 1) / std::max(1e-9, t_last - t_first);
  return r;
}

int64_t int_arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::stoll(argv[i + 1]);
  return fallback;
}
std::vector<int64_t> list_arg(int argc, char** argv, const char* name, const std::string& fallback) {
  std::string s = fallback;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) s = argv[i + 1];
  std::vector<int64_t> out;
  for (size_t b = 0; b < s.size();) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    out.push_back(std::stoll(s.substr(b, e - b)));
    b = e + 1;
  }
  return out;
}
std::string str_arg(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string shape = str_arg(argc, argv, "--shape", "0.8b");
    const std::vector<int64_t> batches = list_arg(argc, argv, "--batches", "1,8");
    const int64_t prompt = int_arg(argc, argv, "--prompt", 1024), new_tokens = int_arg(argc, argv, "--new", 128),
                  runs = int_arg(argc, argv, "--runs", 3);
    const bool with_lora = int_arg(argc, argv, "--lora", 0) != 0, graphs = int_arg(argc, argv, "--graphs", 1) != 0;
    check(new_tokens >= 2 && prompt >= 1 && runs >= 1 && !batches.empty(), "bench_generate: bad arguments");
    const ModelConfig cfg = bench::shape_config(shape, 0);
    auto be = make_cuda_backend(0);
    Qwen35Model model(bench::random_weights(cfg), *be);
    LoraAdapter adapter;
    LoraAdapter* lora = nullptr;
    if (with_lora) {
      LoraSpec spec;
      spec.groups = lora_default_groups(cfg);
      adapter = lora_create(cfg, spec, 1);
      lora_to_backend(adapter, *be);
      lora = &adapter;
    }
    const LoraComputeCopies copies(*be, lora);
    for (const int64_t batch : batches) {
      check(batch >= 1, "bench_generate: --batches must be positive");
      run_once(model, lora, batch, prompt, 4, 0, graphs);  // warm-up: kernels, allocator
      std::vector<Timing> ts;
      for (int64_t r = 0; r < runs; ++r)
        ts.push_back(run_once(model, lora, batch, prompt, new_tokens, uint64_t(r) + 1, graphs));
      auto median = [&](auto field) {
        std::vector<double> v;
        for (const Timing& t : ts) v.push_back(field(t));
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double ttft = median([](const Timing& t) { return t.ttft; });
      const double tps = median([](const Timing& t) { return t.decode_tok_s; });
      const MemoryStats m = be->memory_stats();
      std::printf("%-6s batch %2lld prompt %5lld new %4lld lora %d graphs %d | TTFT %8.1f ms | decode %9.1f tok/s | "
                  "peak %.2f GiB | %s\n",
                  shape.c_str(), static_cast<long long>(batch), static_cast<long long>(prompt),
                  static_cast<long long>(new_tokens), int(with_lora), int(graphs), ttft * 1e3, tps,
                  double(m.peak_allocated_bytes) / (1 << 30), be->name().c_str());
      std::printf("{\"impl\":\"deltatune\",\"shape\":\"%s\",\"batch\":%lld,\"prompt\":%lld,\"new\":%lld,"
                  "\"lora\":%d,\"graphs\":%d,\"ttft_ms\":%.2f,\"decode_tok_s\":%.1f,\"peak_gib\":%.3f,"
                  "\"device\":\"%s\"}\n",
                  shape.c_str(), static_cast<long long>(batch), static_cast<long long>(prompt),
                  static_cast<long long>(new_tokens), int(with_lora), int(graphs), ttft * 1e3, tps,
                  double(m.peak_allocated_bytes) / (1 << 30), be->name().c_str());
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
}
