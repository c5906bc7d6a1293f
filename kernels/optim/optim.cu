// Optimizer updates (torch semantics), elementwise, fp32:
//   AdamW: p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//          p ← p − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps)
//   SGD:   p ← p − lr·(g + wd·p)
// Memory: param, m, v updated in place (one read and one write each), grad read once.
#include "common/device.cuh"
#include "common/multi_tensor.cuh"
#include "optim/optim.cuh"

namespace deltatune::kernels {
namespace {

// One element of the AdamW update, in the same operation order as the CPU reference (torch's lerp for m);
// no FMA contraction, so both agree. gi is the (already scaled) gradient.
struct AdamwArgs {
  float decay;
  bool wd;
  float lerp_w, b2, omb2, neg_step, bc2_sqrt, eps;
};
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float gi, const AdamwArgs& a) {
  float pi = p;
  if (a.wd) pi = __fmul_rn(pi, a.decay);
  float mi = m;
  mi = a.lerp_w < 0.5f ? __fadd_rn(mi, __fmul_rn(a.lerp_w, __fsub_rn(gi, mi)))
                       : __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), __fsub_rn(1.f, a.lerp_w)));
  const float vi = __fadd_rn(__fmul_rn(v, a.b2), __fmul_rn(__fmul_rn(a.omb2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
  p = __fadd_rn(pi, __fmul_rn(a.neg_step, __fdiv_rn(mi, denom)));
  m = mi;
  v = vi;
}

__global__ void adamw_kernel(float* p, KIn g, float* m, float* v, int64_t n, AdamwArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], m[i], v[i], ld(g, i), a);
}

// Many tensors per launch (common/multi_tensor.cuh).
constexpr int kAdamwSlotsPerLaunch = 48;
struct AdamwTable {
  float* p[kAdamwSlotsPerLaunch];
  const float* g[kAdamwSlotsPerLaunch];
  float* m[kAdamwSlotsPerLaunch];
  float* v[kAdamwSlotsPerLaunch];
  int64_t n[kAdamwSlotsPerLaunch];
};
__global__ void adamw_many_kernel(AdamwTable t, float grad_scale, AdamwArgs a) {
  const int k = blockIdx.y;
  float *p = t.p[k], *m = t.m[k], *v = t.v[k];
  const float* g = t.g[k];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = grad_scale == 1.f ? g[i] : __fmul_rn(g[i], grad_scale);
    adamw_element(p[i], m[i], v[i], gi, a);
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
    adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, m, v, n,
                                                  AdamwArgs{decay, weight_decay, lerp_w, b2, omb2, neg_step, bc2_sqrt, eps});
  return cudaGetLastError();
}
cudaError_t launch_adamw_many(float* const* param, const float* const* grad, float* const* m, float* const* v,
                              const int64_t* n, int count, float grad_scale, float decay, bool weight_decay,
                              float lerp_w, float b2, float omb2, float neg_step, float bc2_sqrt, float eps,
                              cudaStream_t s) {
  const AdamwArgs a{decay, weight_decay, lerp_w, b2, omb2, neg_step, bc2_sqrt, eps};
  return launch_in_batches<kAdamwSlotsPerLaunch, AdamwTable>(
      count,
      [&](AdamwTable& t, int j, int i) {
        t.p[j] = param[i], t.g[j] = grad[i], t.m[j] = m[i], t.v[j] = v[i], t.n[j] = n[i];
        return n[i];
      },
      [&](const AdamwTable& t, int k, int64_t most) {
        adamw_many_kernel<<<dim3(grid_for(most, 256, 1024), static_cast<unsigned>(k)), 256, 0, s>>>(t, grad_scale,
                                                                                                      a);
      });
}
cudaError_t launch_sgd(float* param, KIn grad, int64_t n, float lr, float weight_decay, cudaStream_t s) {
  if (n > 0) sgd_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, n, lr, weight_decay);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
