// Gated DeltaNet input side (spec §3.4 steps 3 and 5, backward §3.10 / §4.4):
//   conv:  pre[t,c] = Σ_j w[c,j]·x[t−(K−1)+j, c] (taps before the sequence start read 0), y = silu(pre)
//          dpre = dy·silu'(pre), dx[τ,c] = Σ_j w[c,j]·dpre[τ+K−1−j, c] (only taps inside τ's sequence)
//   gates: β = σ(b), g = −e^{A_log}·softplus(a + dt_bias);  db = dβ·β(1−β),
//          da = dg·(−e^{A_log})·softplus'(a + dt_bias) (torch softplus is linear above 20, slope 1)
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

void CpuBackend::conv1d_silu_fwd(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& y) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  check(w.rows() == C, "cpu backend: conv1d weight " + shape_str(w.shape) + " does not match " +
                           std::to_string(C) + " channels of x " + shape_str(x.shape));
  cpu::check_same(y, x, "conv1d_silu_fwd y");
  const auto& cu = cpu::seq_bounds(seq, T, "conv1d_silu_fwd");
  const float* px = cpu::f32(x, "conv1d_silu_fwd x");
  const float* pw = cpu::f32(w, "conv1d_silu_fwd w");
  float* py = cpu::f32(y, "conv1d_silu_fwd y");
  std::vector<int32_t> lo, hi;
  cpu::seq_token_ranges(cu, lo, hi);
  pool_.parallel_for(T, std::max<int64_t>(1, 4096 / C), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t c = 0; c < C; ++c) {
        float pre = 0.f;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= lo[t]) pre += pw[c * K + j] * px[src * C + c];
        }
        py[t * C + c] = cpu::siluf(pre);
      }
  });
}

void CpuBackend::conv1d_silu_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const SeqLayout& seq,
                                 Tensor& dx) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  check(w.rows() == C, "cpu backend: conv1d weight " + shape_str(w.shape) + " does not match " +
                           std::to_string(C) + " channels of x " + shape_str(x.shape));
  cpu::check_same(dy, x, "conv1d_silu_bwd dy");
  cpu::check_same(dx, x, "conv1d_silu_bwd dx");
  const auto& cu = cpu::seq_bounds(seq, T, "conv1d_silu_bwd");
  const float* pdy = cpu::f32(dy, "conv1d_silu_bwd dy");
  const float* px = cpu::f32(x, "conv1d_silu_bwd x");
  const float* pw = cpu::f32(w, "conv1d_silu_bwd w");
  float* pdx = cpu::f32(dx, "conv1d_silu_bwd dx");
  std::vector<int32_t> lo, hi;
  cpu::seq_token_ranges(cu, lo, hi);
  std::vector<float> dpre(static_cast<size_t>(T * C));
  const int64_t grain = std::max<int64_t>(1, 4096 / C);
  pool_.parallel_for(T, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t c = 0; c < C; ++c) {
        float pre = 0.f;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= lo[t]) pre += pw[c * K + j] * px[src * C + c];
        }
        dpre[t * C + c] = pdy[t * C + c] * cpu::silu_grad(pre);
      }
  });
  pool_.parallel_for(T, grain, [&](int64_t b, int64_t e) {
    for (int64_t tau = b; tau < e; ++tau)
      for (int64_t c = 0; c < C; ++c) {
        float acc = 0.f;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t t = tau + (K - 1) - j;
          if (t < hi[tau]) acc += pw[c * K + j] * dpre[t * C + c];
        }
        pdx[tau * C + c] = acc;
      }
  });
}

void CpuBackend::gdn_gates_fwd(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                               Tensor& g, Tensor& beta) {
  const int64_t HV = A_log.numel(), n = a.numel();
  check(HV > 0 && n % HV == 0 && dt_bias.numel() == HV,
        "cpu backend: gdn_gates a " + shape_str(a.shape) + " is not [T, HV] for HV=" + std::to_string(HV));
  cpu::check_same(b, a, "gdn_gates_fwd b");
  cpu::check_same(g, a, "gdn_gates_fwd g");
  cpu::check_same(beta, a, "gdn_gates_fwd beta");
  const float* pa = cpu::f32(a, "gdn_gates_fwd a");
  const float* pb = cpu::f32(b, "gdn_gates_fwd b");
  const float* pA = cpu::f32(A_log, "gdn_gates_fwd A_log");
  const float* pdt = cpu::f32(dt_bias, "gdn_gates_fwd dt_bias");
  float* pg = cpu::f32(g, "gdn_gates_fwd g");
  float* pbeta = cpu::f32(beta, "gdn_gates_fwd beta");
  pool_.parallel_for(n, 1 << 14, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const int64_t h = i % HV;
      const float bv = pb[i];
      pg[i] = -std::exp(pA[h]) * cpu::softplusf(pa[i] + pdt[h]);
      pbeta[i] = cpu::sigmoidf(bv);
    }
  });
}

void CpuBackend::gdn_gates_bwd(const Tensor& dg, const Tensor& dbeta, const Tensor& a, const Tensor& b,
                               const Tensor& A_log, const Tensor& dt_bias, Tensor& da, Tensor& db) {
  const int64_t HV = A_log.numel(), n = a.numel();
  check(HV > 0 && n % HV == 0 && dt_bias.numel() == HV,
        "cpu backend: gdn_gates a " + shape_str(a.shape) + " is not [T, HV] for HV=" + std::to_string(HV));
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dg, &dbeta, &b, &da, &db}) cpu::check_same(*t, a, "gdn_gates_bwd argument");
  const float* pdg = cpu::f32(dg, "gdn_gates_bwd dg");
  const float* pdbeta = cpu::f32(dbeta, "gdn_gates_bwd dbeta");
  const float* pa = cpu::f32(a, "gdn_gates_bwd a");
  const float* pb = cpu::f32(b, "gdn_gates_bwd b");
  const float* pA = cpu::f32(A_log, "gdn_gates_bwd A_log");
  const float* pdt = cpu::f32(dt_bias, "gdn_gates_bwd dt_bias");
  float* pda = cpu::f32(da, "gdn_gates_bwd da");
  float* pdb = cpu::f32(db, "gdn_gates_bwd db");
  pool_.parallel_for(n, 1 << 14, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const int64_t h = i % HV;
      const float xa = pa[i] + pdt[h];
      const float dsoft = xa > 20.f ? 1.f : cpu::sigmoidf(xa);
      const float beta = cpu::sigmoidf(pb[i]);
      const float dgi = pdg[i], dbi = pdbeta[i];
      pda[i] = dgi * (-std::exp(pA[h])) * dsoft;
      pdb[i] = dbi * beta * (1.f - beta);
    }
  });
}

}  // namespace deltatune
