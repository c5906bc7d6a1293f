// RMSNorm variants (spec §3.3, backward §3.10) and LayerNorm (vision tower), one row of n = w.numel() at a time.
//   zero-centred: y = x·r·(1+w)    plain: y = x·r·w    gated: y = x·r·w·silu(z),  r = 1/sqrt(mean(x²)+eps)
//   backward: x̂ = x·r, dx̂ = dy·(scale), dx = r·(dx̂ − x̂·mean(dx̂·x̂))
// Row sums accumulate in double so the reference is not the noisiest side of a CPU/CUDA comparison.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n)); }

float row_rstd(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
}

// dx = r·(dxh − x̂·mean(dxh·x̂)) with x̂ = x·r.
void norm_row_bwd(const float* x, const float* dxh, float r, int64_t n, float* dx) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += double(dxh[i]) * (double(x[i]) * r);
  const float mean = static_cast<float>(dot / double(n));
  for (int64_t i = 0; i < n; ++i) dx[i] = r * (dxh[i] - x[i] * r * mean);
}

}  // namespace

void CpuBackend::rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                             Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n, "cpu backend: rmsnorm x " + shape_str(x.shape) + " is not rows of " +
                                            std::to_string(n) + " (the weight length)");
  cpu::check_same(y, x, "rmsnorm y");
  cpu::check_numel(rstd, rows, "rmsnorm rstd");
  const float* px = cpu::f32(x, "rmsnorm x");
  const float* pw = cpu::f32(w, "rmsnorm w");
  float* py = cpu::f32(y, "rmsnorm y");
  float* pr = cpu::f32(rstd, "rmsnorm rstd");
  const float off = zero_centred ? 1.f : 0.f;
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = px + r * n;
      const float s = row_rstd(xr, n, eps);
      pr[r] = s;
      for (int64_t i = 0; i < n; ++i) py[r * n + i] = (xr[i] * s) * (off + pw[i]);
    }
  });
}

void CpuBackend::rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             bool zero_centred, Tensor& dx) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  cpu::check_same(dy, x, "rmsnorm_bwd dy");
  cpu::check_same(dx, x, "rmsnorm_bwd dx");
  cpu::check_numel(rstd, rows, "rmsnorm_bwd rstd");
  const float* pdy = cpu::f32(dy, "rmsnorm_bwd dy");
  const float* px = cpu::f32(x, "rmsnorm_bwd x");
  const float* pw = cpu::f32(w, "rmsnorm_bwd w");
  const float* pr = cpu::f32(rstd, "rmsnorm_bwd rstd");
  float* pdx = cpu::f32(dx, "rmsnorm_bwd dx");
  const float off = zero_centred ? 1.f : 0.f;
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    std::vector<float> dxh(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t i = 0; i < n; ++i) dxh[i] = pdy[r * n + i] * (off + pw[i]);
      norm_row_bwd(px + r * n, dxh.data(), pr[r], n, pdx + r * n);
    }
  });
}

void CpuBackend::gated_rmsnorm_fwd(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y,
                                   Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n, "cpu backend: gated_rmsnorm x " + shape_str(x.shape) +
                                            " is not rows of " + std::to_string(n) + " (the weight length)");
  cpu::check_same(z, x, "gated_rmsnorm z");
  cpu::check_same(y, x, "gated_rmsnorm y");
  cpu::check_numel(rstd, rows, "gated_rmsnorm rstd");
  const float* px = cpu::f32(x, "gated_rmsnorm x");
  const float* pz = cpu::f32(z, "gated_rmsnorm z");
  const float* pw = cpu::f32(w, "gated_rmsnorm w");
  float* py = cpu::f32(y, "gated_rmsnorm y");
  float* pr = cpu::f32(rstd, "gated_rmsnorm rstd");
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = px + r * n;
      const float s = row_rstd(xr, n, eps);
      pr[r] = s;
      for (int64_t i = 0; i < n; ++i) py[r * n + i] = (xr[i] * s * pw[i]) * cpu::siluf(pz[r * n + i]);
    }
  });
}

void CpuBackend::gated_rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w,
                                   const Tensor& rstd, Tensor& dx, Tensor& dz) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  cpu::check_same(dy, x, "gated_rmsnorm_bwd dy");
  cpu::check_same(z, x, "gated_rmsnorm_bwd z");
  cpu::check_same(dx, x, "gated_rmsnorm_bwd dx");
  cpu::check_same(dz, x, "gated_rmsnorm_bwd dz");
  cpu::check_numel(rstd, rows, "gated_rmsnorm_bwd rstd");
  const float* pdy = cpu::f32(dy, "gated_rmsnorm_bwd dy");
  const float* px = cpu::f32(x, "gated_rmsnorm_bwd x");
  const float* pz = cpu::f32(z, "gated_rmsnorm_bwd z");
  const float* pw = cpu::f32(w, "gated_rmsnorm_bwd w");
  const float* pr = cpu::f32(rstd, "gated_rmsnorm_bwd rstd");
  float* pdx = cpu::f32(dx, "gated_rmsnorm_bwd dx");
  float* pdz = cpu::f32(dz, "gated_rmsnorm_bwd dz");
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b, int64_t e) {
    std::vector<float> dxh(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const float s = pr[r];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t o = r * n + i;
        const float zi = pz[o], g = pdy[o];
        dxh[i] = g * cpu::siluf(zi) * pw[i];
        pdz[o] = g * (px[o] * s * pw[i]) * cpu::silu_grad(zi);
      }
      norm_row_bwd(px + r * n, dxh.data(), s, n, pdx + r * n);
    }
  });
}

// LayerNorm (the vision tower): x̂ = (x − mean)·r, y = x̂·w + b; backward dx̂ = dy·w,
// dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)).
void CpuBackend::layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                                Tensor& mean, Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && b.numel() == n,
        "cpu backend: layer_norm x " + shape_str(x.shape) + " is not rows of " + std::to_string(n) +
            " (the weight length) or the bias has " + std::to_string(b.numel()) + " values");
  cpu::check_same(y, x, "layer_norm y");
  cpu::check_numel(mean, rows, "layer_norm mean");
  cpu::check_numel(rstd, rows, "layer_norm rstd");
  const float* px = cpu::f32(x, "layer_norm x");
  const float* pw = cpu::f32(w, "layer_norm w");
  const float* pb = cpu::f32(b, "layer_norm b");
  float* py = cpu::f32(y, "layer_norm y");
  float* pm = cpu::f32(mean, "layer_norm mean");
  float* pr = cpu::f32(rstd, "layer_norm rstd");
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b0, int64_t e) {
    for (int64_t r = b0; r < e; ++r) {
      const float* xr = px + r * n;
      double s = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) s += xr[i];
      const double mu = s / double(n);
      for (int64_t i = 0; i < n; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
      const auto inv = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
      pm[r] = static_cast<float>(mu);
      pr[r] = inv;
      for (int64_t i = 0; i < n; ++i) py[r * n + i] = (xr[i] - pm[r]) * inv * pw[i] + pb[i];
    }
  });
}

void CpuBackend::layer_norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd, Tensor& dx) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  cpu::check_same(dy, x, "layer_norm_bwd dy");
  cpu::check_same(dx, x, "layer_norm_bwd dx");
  cpu::check_numel(mean, rows, "layer_norm_bwd mean");
  cpu::check_numel(rstd, rows, "layer_norm_bwd rstd");
  const float* pdy = cpu::f32(dy, "layer_norm_bwd dy");
  const float* px = cpu::f32(x, "layer_norm_bwd x");
  const float* pw = cpu::f32(w, "layer_norm_bwd w");
  const float* pm = cpu::f32(mean, "layer_norm_bwd mean");
  const float* pr = cpu::f32(rstd, "layer_norm_bwd rstd");
  float* pdx = cpu::f32(dx, "layer_norm_bwd dx");
  pool_.parallel_for(rows, row_grain(n), [&](int64_t b0, int64_t e) {
    std::vector<float> xh(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t r = b0; r < e; ++r) {
      const float rs = pr[r];
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < n; ++i) {
        xh[size_t(i)] = (px[r * n + i] - pm[r]) * rs;
        g[size_t(i)] = pdy[r * n + i] * pw[i];
        sg += g[size_t(i)];
        sgx += double(g[size_t(i)]) * xh[size_t(i)];
      }
      const auto mg = static_cast<float>(sg / double(n)), mgx = static_cast<float>(sgx / double(n));
      for (int64_t i = 0; i < n; ++i) pdx[r * n + i] = rs * (g[size_t(i)] - mg - xh[size_t(i)] * mgx);
    }
  });
}

}  // namespace deltatune
