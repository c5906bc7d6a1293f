#include "vision/mrope_positions.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace deltatune {

std::array<std::vector<int32_t>, 3> mrope_positions(const std::vector<int32_t>& ids, int32_t image_token_id,
                                                    const std::vector<std::array<int64_t, 3>>& grids,
                                                    int64_t merge_size, const std::string& source) {
  std::array<std::vector<int32_t>, 3> pos;
  for (auto& row : pos) row.reserve(ids.size());
  int64_t p = 0;
  size_t image = 0;
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] != image_token_id) {
      for (auto& row : pos) row.push_back(int32_t(p));
      ++p;
      ++i;
      continue;
    }
    size_t end = i;
    while (end < ids.size() && ids[end] == image_token_id) ++end;
    check(image < grids.size(), source + ": more image-token runs than images (" + std::to_string(grids.size()) + ")");
    const auto& g = grids[image++];
    const int64_t t = g[0], h = g[1] / merge_size, w = g[2] / merge_size;
    check(int64_t(end - i) == t * h * w, source + ": image " + std::to_string(image) + " has " +
                                             std::to_string(end - i) + " image tokens, its grid needs " +
                                             std::to_string(t * h * w));
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t wi = 0; wi < w; ++wi) {
          pos[0].push_back(int32_t(p + ti));
          pos[1].push_back(int32_t(p + hi));
          pos[2].push_back(int32_t(p + wi));
        }
    p += std::max(h, w);
    i = end;
  }
  check(image == grids.size(), source + ": " + std::to_string(grids.size()) + " images but " +
                                   std::to_string(image) + " image-token runs");
  return pos;
}

void mrope_cos_sin(const std::array<std::vector<int32_t>, 3>& positions, int64_t rot_dim, double theta,
                   const std::array<int64_t, 3>& section, std::vector<float>& cos, std::vector<float>& sin) {
  const int64_t half = rot_dim / 2;
  check(rot_dim % 2 == 0 && section[0] + section[1] + section[2] == half,
        "mrope: mrope_section must add up to rotary_dim / 2 (" + std::to_string(half) + ")");
  const size_t T = positions[0].size();
  check(positions[1].size() == T && positions[2].size() == T, "mrope: the three position rows differ in length");
  std::vector<int> axis(static_cast<size_t>(half), 0);
  for (int64_t i = 0; i < half; ++i) {
    if (i % 3 == 1 && i < 3 * section[1]) axis[size_t(i)] = 1;
    if (i % 3 == 2 && i < 3 * section[2]) axis[size_t(i)] = 2;
  }
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[size_t(i)] = 1.f / std::pow(float(theta), float(2 * i) / float(rot_dim));
  cos.assign(T * size_t(rot_dim), 0.f);
  sin.assign(T * size_t(rot_dim), 0.f);
  for (size_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float f = float(positions[size_t(axis[size_t(i)])][t]) * inv_freq[size_t(i)];
      for (int64_t rep = 0; rep < 2; ++rep) {
        cos[t * size_t(rot_dim) + size_t(rep * half + i)] = std::cos(f);
        sin[t * size_t(rot_dim) + size_t(rep * half + i)] = std::sin(f);
      }
    }
}

}  // namespace deltatune
