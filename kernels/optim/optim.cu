// Optimizer updates (torch semantics), elementwise, fp32:
//   AdamW: p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//          p ← p − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps)
//   SGD:   p ← p − lr·(g + wd·p)
// Memory: param, m, v updated in place (one read and one write each), grad read once.
#include "common/device.cuh"
#include "optim/optim.cuh"

namespace deltatune::kernels {
namespace {

// The same operation order as the CPU reference (torch's lerp for m); no FMA contraction, so both agree.
__global__ void adamw_kernel(float* p, KIn g, float* m, float* v, int64_t n, float decay, bool wd, float lerp_w,
                             float b2, float omb2, float neg_step, float bc2_sqrt, float eps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = ld(g, i);
    float pi = p[i];
    if (wd) pi = __fmul_rn(pi, decay);
    float mi = m[i];
    mi = lerp_w < 0.5f ? __fadd_rn(mi, __fmul_rn(lerp_w, __fsub_rn(gi, mi)))
                       : __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), __fsub_rn(1.f, lerp_w)));
    const float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(omb2, gi), gi));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    p[i] = __fadd_rn(pi, __fmul_rn(neg_step, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void sgd_kernel(float* p, KIn g, int64_t n, float lr, float wd) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] -= lr * (ld(g, i) + wd * p[i]);
}

}  // namespace

cudaError_t launch_adamw(float* param, KIn grad, float* m, float* v, int64_t n, float decay, bool weight_decay,
                         float lerp_w, float b2, float omb2, float neg_step, float bc2_sqrt, float eps,
                         cudaStream_t s) {
  if (n > 0)
    adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, m, v, n, decay, weight_decay, lerp_w, b2, omb2,
                                                  neg_step, bc2_sqrt, eps);
  return cudaGetLastError();
}
cudaError_t launch_sgd(float* param, KIn grad, int64_t n, float lr, float weight_decay, cudaStream_t s) {
  if (n > 0) sgd_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, n, lr, weight_decay);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
