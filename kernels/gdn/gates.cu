// GDN gates (spec §3.4 step 5, §3.10), elementwise over (T, HV), fp32 math:
//   forward:  β (=) σ(b);  g (=) −exp(A_log)·softplus(a + dt_bias)   (g F32)
//   backward: db (=) dβ·β(1−β);  da (=) dg·(−exp(A_log))·σ(a + dt_bias)
#include "common/device.cuh"
#include "gdn/gate_math.cuh"
#include "gdn/gdn.cuh"

namespace deltatune::kernels {
namespace {

__global__ void gates_fwd_kernel(KIn a, KIn b, KIn A_log, KIn dt_bias, float* g, KOut beta, int64_t T, int64_t HV) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * HV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % HV;
    st(beta, i, gate_beta(b, i));
    g[i] = gate_g(a, A_log, dt_bias, i, h);
  }
}

__global__ void gates_bwd_kernel(KIn dg, KIn dbeta, KIn a, KIn b, KIn A_log, KIn dt_bias, KOut da, KOut db, int64_t T,
                                 int64_t HV) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * HV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % HV;
    st(db, i, gate_db(ld(dbeta, i), gate_beta(b, i)));
    st(da, i, gate_da(ld(dg, i), a, A_log, dt_bias, i, h));
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
