// The vision tower of the public Qwen3.5 shapes (9B: depth 27, hidden 1152, 16 heads, intermediate 4304, out 4096,
// patch 16, merge 2) with random weights drawn from one uniform bank (std 0.02) at per-matrix offsets: no 430M
// host random draws. Shared by bench_vision_tower and bench_vision_step.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "vision/vision_tower.h"

namespace deltatune::bench {

struct ValueBank {
  std::vector<float> v;
  explicit ValueBank(size_t n) : v(n) {
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-0.0346f, 0.0346f);
    for (float& x : v) x = u(g);
  }
  std::vector<float> take(size_t n, size_t& at) const {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = v[(at + i) % v.size()];
    at = (at * 2654435761u + 97) % v.size();
    return out;
  }
};

inline VisionConfig vision_config_9b(int64_t depth) {
  VisionConfig c;
  c.depth = depth, c.hidden = 1152, c.heads = 16, c.intermediate = 4304, c.out_hidden = 4096;
  c.num_position_embeddings = 2304, c.patch_size = 16, c.temporal_patch_size = 2, c.merge_size = 2;
  return c;
}

inline std::shared_ptr<VisionWeights> random_vision_tower(const VisionConfig& c, const ValueBank& bank, size_t& at) {
  auto linear_of = [&](int64_t out, int64_t in) {
    VisionLinear l;
    l.out = out, l.in = in;
    l.w = bank.take(size_t(out * in), at);
    l.b = bank.take(size_t(out), at);
    return l;
  };
  auto norm_of = [](int64_t n) {
    return VisionLayerNorm{std::vector<float>(size_t(n), 1.f), std::vector<float>(size_t(n), 0.f)};
  };
  auto w = std::make_shared<VisionWeights>();
  w->cfg = c;
  const int64_t H = c.hidden, M = c.merge_size * c.merge_size * H;
  w->patch_embed = linear_of(H, c.patch_features());
  w->pos_embed = bank.take(size_t(c.num_position_embeddings * H), at);
  for (int64_t i = 0; i < c.depth; ++i) {
    VisionBlockWeights b{norm_of(H), norm_of(H), linear_of(3 * H, H), linear_of(H, H), linear_of(c.intermediate, H),
                         linear_of(H, c.intermediate)};
    w->blocks.push_back(std::move(b));
  }
  w->merger_norm = norm_of(H);
  w->merger_fc1 = linear_of(M, M);
  w->merger_fc2 = linear_of(c.out_hidden, M);
  return w;
}

}  // namespace deltatune::bench
