// GDN gate math (spec §3.4 step 5, §3.10), one definition for the gates kernels (gates.cu) and the
// tensor-core core that forms the gates while loading (GdnGates with raw inputs): fp32 math,
//   g = −e^{A_log}·softplus(a + dt_bias),  β = σ(b);   da = dg·(−e^{A_log})·σ(a + dt_bias),  db = dβ·β(1−β).
#pragma once
#include "common/device.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {

// i: element (t·HV + h) of the (T, HV) tensors, h: value head.
__device__ __forceinline__ float gate_g(KIn a, KIn A_log, KIn dt_bias, int64_t i, int64_t h) {
  return -expf(ld(A_log, h)) * softplusf_(ld(a, i) + ld(dt_bias, h));
}
__device__ __forceinline__ float gate_beta(KIn b, int64_t i) {
  return sigmoidf_(ld(b, i));
}
__device__ __forceinline__ float gate_da(float dg, KIn a, KIn A_log, KIn dt_bias, int64_t i, int64_t h) {
  return dg * (-expf(ld(A_log, h))) * sigmoidf_(ld(a, i) + ld(dt_bias, h));
}
__device__ __forceinline__ float gate_db(float dbeta, float beta) {
  return dbeta * beta * (1.f - beta);
}

// The gates a core kernel reads, given (g, beta) or formed from the raw inputs (GdnGates::a set).
__device__ __forceinline__ float gdn_g_at(const GdnGates& gt, int64_t i, int64_t h) {
  return gt.a.p ? gate_g(gt.a, gt.A_log, gt.dt_bias, i, h) : gt.g[i];
}
__device__ __forceinline__ float gdn_beta_at(const GdnGates& gt, int64_t i) {
  return gt.a.p ? gate_beta(gt.b, i) : ld(gt.beta, i);
}

}  // namespace deltatune::kernels
