// Harness for tests/cuda/backend_ops.cpp: the same seeded inputs on the CPU reference backend (F32) and
// the CUDA backend (BF16 or F32 as the model uses them), guarded and NaN-poisoned GPU outputs, and the
// comparison (non-finite agreement, normalised MSE = Σ(gpu − cpu)² / Σ cpu²).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace deltatune::test {

// One tensor on both backends. g_buf is the guarded allocation behind g (for outputs).
struct Pair {
  Tensor c, g;
  Tensor g_buf;
  int64_t guard = 0;
};

constexpr int64_t kGuard = 67;          // elements before and after each GPU output
constexpr int64_t kGuard16 = 64;        // a guard that leaves bf16 / f32 outputs 16-byte aligned
constexpr float kSentinel = -7168.f;    // exactly representable in bf16 and f16

class Env {
 public:
  std::unique_ptr<Backend> cpu, gpu;
  std::mt19937_64 rng{12345};

  // Host F32 tensor of uniform values in [lo, hi), rounded through `dt` so both sides see the same numbers.
  Tensor host_rand(const Shape& s, DType dt, float lo, float hi) {
    Tensor h = host_tensor(s, DType::F32);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < h.numel(); ++i) h.ptr<float>()[i] = u(rng);
    return dt == DType::F32 ? h : host_convert(host_convert(h, dt), DType::F32);
  }
  Pair from_host(const Tensor& h, DType gdt) {
    Pair p;
    p.c = cpu->upload(h, DType::F32);
    p.g = gpu->upload(h, gdt);
    return p;
  }
  Pair in(const Shape& s, DType gdt, float lo = -1.f, float hi = 1.f) { return from_host(host_rand(s, gdt, lo, hi), gdt); }
  Pair ints(const Shape& s, const std::vector<int32_t>& v) {
    Tensor h = host_tensor(s, DType::I32);
    EXPECT_EQ(static_cast<int64_t>(v.size()), h.numel());
    std::memcpy(h.data, v.data(), v.size() * 4);
    Pair p;
    p.c = cpu->upload(h, DType::I32);
    p.g = gpu->upload(h, DType::I32);
    return p;
  }
  // Output: CPU zeros; GPU view inside a buffer with `guard` sentinel elements on both sides, poisoned with NaN.
  Pair out(const Shape& s, DType gdt, int64_t guard = kGuard) {
    Pair p;
    p.c = cpu->zeros(s, DType::F32);
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    p.g_buf = gpu->alloc({n + 2 * guard}, gdt);
    gpu->fill(p.g_buf, kSentinel);
    p.guard = guard;
    p.g = p.g_buf;
    p.g.shape = s;
    p.g.data = static_cast<char*>(p.g_buf.data) + guard * static_cast<int64_t>(dtype_size(gdt));
    gpu->fill(p.g, NAN);
    return p;
  }
  // Output pre-filled with the same values on both sides (for (+=) ops and partial writes).
  Pair out_init(const Shape& s, DType gdt, float lo = -1.f, float hi = 1.f, int64_t guard = kGuard) {
    Tensor h = host_rand(s, gdt, lo, hi);
    Pair p = out(s, gdt, guard);
    p.c = cpu->upload(h, DType::F32);
    Tensor tmp = gpu->upload(h, gdt);
    gpu->copy(p.g, tmp);
    return p;
  }
  std::vector<float> down(Backend& b, const Tensor& t) { return host_to_f32(b.download(t, DType::F32)); }
  SeqLayout layout(Backend& b, const std::vector<int32_t>& cu) {
    SeqLayout s;
    s.host_cu_seqlens = cu;
    Tensor hc = host_tensor({static_cast<int64_t>(cu.size())}, DType::I32);
    std::memcpy(hc.data, cu.data(), cu.size() * 4);
    s.cu_seqlens = b.upload(hc, DType::I32);
    Tensor hp = host_tensor({cu.back()}, DType::I32);
    for (size_t n = 0; n + 1 < cu.size(); ++n) {
      for (int32_t t = cu[n]; t < cu[n + 1]; ++t) hp.ptr<int32_t>()[t] = t - cu[n];
      s.max_seqlen = std::max(s.max_seqlen, cu[n + 1] - cu[n]);
    }
    s.positions = b.upload(hp, DType::I32);
    return s;
  }
};

// Measured error of one comparison (printed at the end of each case for the report).
struct Measure {
  std::string name;
  double nmse = 0, max_abs = 0;
  int64_t n = 0;
};

inline double nmse_of(const std::vector<float>& g, const std::vector<float>& c, double* max_abs) {
  double num = 0, den = 0;
  *max_abs = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!std::isfinite(c[i]) || !std::isfinite(g[i])) continue;
    const double d = double(g[i]) - double(c[i]);
    num += d * d;
    den += double(c[i]) * double(c[i]);
    *max_abs = std::max(*max_abs, std::fabs(d));
  }
  if (den == 0) return num == 0 ? 0 : num;  // all-zero reference: absolute squared error
  return num / den;
}

// Compares GPU against CPU: guards intact, same non-finite positions (NaN vs NaN, ±Inf same sign), and
// nmse <= tol. Returns the measurement.
inline Measure compare(Env& e, const std::string& name, const Pair& p, double tol) {
  Measure m;
  m.name = name;
  const std::vector<float> c = e.down(*e.cpu, p.c);
  const std::vector<float> g = e.down(*e.gpu, p.g);
  EXPECT_EQ(c.size(), g.size()) << name;
  if (c.size() != g.size()) return m;
  m.n = static_cast<int64_t>(c.size());
  if (p.g_buf.defined()) {
    const std::vector<float> buf = e.down(*e.gpu, p.g_buf);
    int64_t bad = 0;
    for (int64_t i = 0; i < p.guard; ++i) {
      bad += buf[static_cast<size_t>(i)] != kSentinel;
      bad += buf[buf.size() - 1 - static_cast<size_t>(i)] != kSentinel;
    }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " guard elements overwritten (out-of-bounds write)";
  }
  int64_t nonfinite_mismatch = 0, first = -1;
  for (size_t i = 0; i < c.size(); ++i) {
    const bool same = (std::isnan(c[i]) && std::isnan(g[i])) || (std::isinf(c[i]) && c[i] == g[i]) ||
                      (std::isfinite(c[i]) && std::isfinite(g[i]));
    if (!same) {
      ++nonfinite_mismatch;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(nonfinite_mismatch, 0) << name << ": non-finite disagreement, first at " << first << " (cpu "
                                   << (first >= 0 ? c[first] : 0.f) << ", gpu " << (first >= 0 ? g[first] : 0.f)
                                   << ")";
  m.nmse = nmse_of(g, c, &m.max_abs);
  EXPECT_LE(m.nmse, tol) << name << ": normalised MSE " << m.nmse << " over " << m.n << " elements (max abs "
                         << m.max_abs << ")";
  std::printf("  %-44s nmse %.3e  max|d| %.3e  (n=%lld, tol %.0e)\n", name.c_str(), m.nmse, m.max_abs,
              static_cast<long long>(m.n), tol);
  return m;
}

// Relative error of two scalars.
inline void compare_scalar(const std::string& name, double gpu, double cpu, double tol) {
  const double rel = std::fabs(gpu - cpu) / std::max(1e-30, std::fabs(cpu));
  EXPECT_LE(rel, tol) << name << ": gpu " << gpu << " cpu " << cpu;
  std::printf("  %-44s rel %.3e  (gpu %.8g, cpu %.8g, tol %.0e)\n", name.c_str(), rel, gpu, cpu, tol);
}

struct OpCase {
  std::string name;
  std::vector<std::string> ops;  // interface functions this case exercises
  std::function<void(Env&)> run;
};

}  // namespace deltatune::test
