// Helpers for the CPU backend tests: seeded random host tensors, packed-sequence layouts and a central
// finite-difference check of L = Σ r⊙out against an analytic gradient.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace deltatune::cpu_test {

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  float normal() { return std::normal_distribution<float>(0.f, 1.f)(gen); }
  int64_t index(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen); }
};

inline Tensor rand_tensor(Rng& rng, Shape shape, float lo = -1.f, float hi = 1.f) {
  Tensor t = host_tensor(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = rng.uniform(lo, hi);
  return t;
}

inline Tensor randn_tensor(Rng& rng, Shape shape, float stddev = 1.f) {
  Tensor t = host_tensor(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = stddev * rng.normal();
  return t;
}

inline Tensor clone(const Tensor& t) { return host_convert(t, t.dtype); }

inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = host_tensor({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}

inline std::vector<float> vec(const Tensor& t) { return host_to_f32(t); }

inline SeqLayout make_seq(const std::vector<int32_t>& lengths) {
  SeqLayout s;
  s.host_cu_seqlens.push_back(0);
  std::vector<int32_t> pos;
  for (int32_t L : lengths) {
    s.host_cu_seqlens.push_back(s.host_cu_seqlens.back() + L);
    for (int32_t i = 0; i < L; ++i) pos.push_back(i);
    s.max_seqlen = std::max(s.max_seqlen, L);
  }
  s.cu_seqlens = i32_tensor(s.host_cu_seqlens);
  s.positions = i32_tensor(pos);
  return s;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = vec(a), y = vec(b);
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, double(std::fabs(x[i] - y[i])));
  return m;
}

inline double max_abs(const Tensor& a) {
  double m = 0;
  for (float v : vec(a)) m = std::max(m, double(std::fabs(v)));
  return m;
}

// Σ r⊙out in double.
inline double weighted_sum(const Tensor& r, const Tensor& out) {
  const auto a = vec(r), b = vec(out);
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Compares analytic dL/dx with central differences of loss() at `samples` random entries of x (all of
// them if x is small). Returns max |fd − analytic| (sampled) / max |analytic| (whole tensor).
inline double fd_rel_error(Tensor& x, const Tensor& analytic, const std::function<double()>& loss, Rng& rng,
                           int samples = 40, float eps = 1e-3f) {
  const int64_t n = x.numel();
  std::vector<int64_t> idx;
  if (n <= samples) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int s = 0; s < samples; ++s) idx.push_back(rng.index(n));
  }
  float* p = x.ptr<float>();
  const float* g = analytic.ptr<float>();
  double max_err = 0, max_grad = 0;
  for (int64_t i : idx) {
    const float keep = p[i], up = keep + eps, down = keep - eps;
    p[i] = up;
    const double lp = loss();
    p[i] = down;
    const double lm = loss();
    p[i] = keep;
    const double fd = (lp - lm) / (double(up) - double(down));  // the step actually taken in fp32
    max_err = std::max(max_err, std::fabs(fd - double(g[i])));
  }
  // Normalised by the largest gradient entry of the whole tensor: the test scales with the gradient,
  // and sampled entries that are structurally ~0 (e.g. causally masked) do not blow up the ratio.
  for (int64_t i = 0; i < n; ++i) max_grad = std::max(max_grad, std::fabs(double(g[i])));
  return max_grad > 0 ? max_err / max_grad : max_err;
}

// Prints a measured error so the test log documents it (the numbers go into the report).
inline void report(const char* what, double value) { std::printf("[measured] %-44s %.3e\n", what, value); }

}  // namespace deltatune::cpu_test
