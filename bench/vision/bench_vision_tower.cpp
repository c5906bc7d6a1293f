// The vision tower of the 9B shape (depth 27, hidden 1152, 16 heads, intermediate 4304, out 4096, patch 16,
// merge 2) on one 1024x1024 image (64x64 patches, 1024 merged tokens) on the CUDA backend, random weights:
//   frozen forward (the default: the tower is frozen) and forward + backward with LoRA r 16 on every block's
//   attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2 (the `vision` group).
// Prints a table and one JSON line per mode; hf_vision_tower.py runs transformers' Qwen3_5VisionModel (+ PEFT) on
// the same shapes (run_vision.sh runs both).
// Usage: bench_vision_tower [--images N] [--side 1024] [--steps 5] [--warmup 2] [--depth 27]
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <memory>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "core/error.h"
#include "lora/lora.h"
#include "model/lora_linear.h"
#include "model/vision_encoder.h"
#include "vision/vision_tower.h"
#include "../common/random_vision_tower.h"

using namespace deltatune;

using deltatune::bench::ValueBank;

int main(int argc, char** argv) {
  try {
    int images = 1, steps = 5, warmup = 2;
    int64_t side = 1024, depth = 27;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        check(i + 1 < argc, a + " needs a value");
        return argv[++i];
      };
      if (a == "--images") images = std::stoi(next());
      else if (a == "--side") side = std::stoll(next());
      else if (a == "--steps") steps = std::stoi(next());
      else if (a == "--warmup") warmup = std::stoi(next());
      else if (a == "--depth") depth = std::stoll(next());
      else throw Error("unknown option " + a);
    }
    check(side % 32 == 0, "--side must be a multiple of 32 (patch 16 x merge 2)");
    const VisionConfig c = bench::vision_config_9b(depth);
    const ValueBank bank(size_t(1) << 24);
    size_t at = 0;
    const auto w = bench::random_vision_tower(c, bank, at);
    const int64_t H = c.hidden;
    const int64_t g = side / 16;
    std::vector<std::array<int64_t, 3>> grids(size_t(images), {1, g, g});
    const int64_t N = vision_patch_count(grids), tokens = N / 4;
    std::vector<float> pixels = bank.take(size_t(N * c.patch_features()), at);
    for (float& p : pixels) p *= 50.f;  // about the normalised pixel range

    auto be = make_cuda_backend(0, DType::BF16);
    VisionEncoder tower(*be, w);
    // LoRA r 16 on the vision group: A as PEFT initialises it, B small and non-zero so every product runs.
    LoraAdapter adapter;
    adapter.r = 16;
    adapter.alpha = 32;
    for (int64_t i = 0; i < depth; ++i)
      for (auto [suffix, in, out] : {std::tuple{"attn.qkv", H, 3 * H}, std::tuple{"attn.proj", H, H},
                                     std::tuple{"mlp.linear_fc1", H, c.intermediate},
                                     std::tuple{"mlp.linear_fc2", c.intermediate, H}}) {
        LoraModule m;
        m.path = "visual.blocks." + std::to_string(i) + "." + suffix;
        m.group = "vision";
        m.suffix = suffix;
        m.layer = int(i);
        m.in = in, m.out = out, m.r = 16, m.scaling = 2.f;
        m.A = host_tensor({16, in});
        m.B = host_tensor({out, 16});
        const auto a = bank.take(size_t(16 * in), at), b = bank.take(size_t(16 * out), at);
        std::memcpy(m.A.data, a.data(), a.size() * 4);
        std::memcpy(m.B.data, b.data(), b.size() * 4);
        adapter.modules.push_back(std::move(m));
      }
    adapter.reindex();
    lora_to_backend(adapter, *be);
    Tensor d = be->upload(
        [&] {
          Tensor t = host_tensor({tokens, c.out_hidden});
          const auto v = bank.take(size_t(tokens * c.out_hidden), at);
          std::memcpy(t.data, v.data(), v.size() * 4);
          return t;
        }(),
        DType::BF16);

    std::printf("%-22s %8s %8s %10s %10s %10s\n", "mode", "images", "patches", "ms/step", "images/s", "peak GiB");
    for (const bool train : {false, true}) {
      be->synchronize();
      double ms = 0;
      for (int s = 0; s < warmup + steps; ++s) {
        be->synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        {
          const LoraComputeCopies copies(*be, train ? &adapter : nullptr);
          VisionEncoder::Saved saved;
          LoraRuntime rt;
          rt.training = train;
          tower.forward(pixels, grids, train ? &adapter : nullptr, rt, train ? &saved : nullptr);
          if (train) tower.backward(d, adapter, rt, saved);
        }
        be->synchronize();
        if (s >= warmup) ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      }
      ms /= steps;
      const MemoryStats after = be->memory_stats();
      const double peak = double(after.peak_allocated_bytes) / double(1 << 30);
      const char* mode = train ? "fwd+bwd (vision LoRA)" : "fwd (frozen)";
      std::printf("%-22s %8d %8lld %10.1f %10.2f %10.2f\n", mode, images, (long long)N, ms, images * 1000.0 / ms, peak);
      std::printf("{\"bench\": \"vision_tower\", \"impl\": \"deltatune\", \"mode\": \"%s\", \"images\": %d, \"side\": %lld, "
                  "\"depth\": %lld, \"patches\": %lld, \"ms\": %.3f, \"images_per_s\": %.3f, \"peak_gib\": %.3f}\n",
                  train ? "train" : "frozen", images, (long long)side, (long long)depth, (long long)N, ms,
                  images * 1000.0 / ms, peak);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vision_tower: %s\n", e.what());
    return 1;
  }
}
