// GDN gates (spec §3.4 step 5, §3.10), elementwise over (T, HV), fp32 math:
//   forward:  β (=) σ(b);  g (=) −exp(A_log)·softplus(a + dt_bias)   (g F32)
//   backward: db (=) dβ·β(1−β);  da (=) dg·(−exp(A_log))·σ(a + dt_bias)
#include "common/device.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

__global__ void gates_fwd_kernel(KIn a, KIn b, KIn A_log, KIn dt_bias, float* g, KOut beta, int64_t T, int64_t HV) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * HV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % HV;
    st(beta, i, sigmoidf_(ld(b, i)));
    g[i] = -expf(ld(A_log, h)) * softplusf_(ld(a, i) + ld(dt_bias, h));
  }
}

__global__ void gates_bwd_kernel(KIn dg, KIn dbeta, KIn a, KIn b, KIn A_log, KIn dt_bias, KOut da, KOut db, int64_t T,
                                 int64_t HV) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * HV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % HV;
    const float be = sigmoidf_(ld(b, i));
    st(db, i, ld(dbeta, i) * be * (1.f - be));
    st(da, i, ld(dg, i) * (-expf(ld(A_log, h))) * sigmoidf_(ld(a, i) + ld(dt_bias, h)));
  }
}

}  // namespace

cudaError_t launch_gdn_gates_fwd(KIn a, KIn b, KIn A_log, KIn dt_bias, float* g, KOut beta, int64_t T, int64_t HV,
                                 cudaStream_t s) {
  if (T * HV > 0) gates_fwd_kernel<<<grid_for(T * HV, 256), 256, 0, s>>>(a, b, A_log, dt_bias, g, beta, T, HV);
  return cudaGetLastError();
}
cudaError_t launch_gdn_gates_bwd(KIn dg, KIn dbeta, KIn a, KIn b, KIn A_log, KIn dt_bias, KOut da, KOut db, int64_t T,
                                 int64_t HV, cudaStream_t s) {
  if (T * HV > 0)
    gates_bwd_kernel<<<grid_for(T * HV, 256), 256, 0, s>>>(dg, dbeta, a, b, A_log, dt_bias, da, db, T, HV);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
