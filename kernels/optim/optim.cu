// Optimizer updates (torch semantics), elementwise, fp32:
//   AdamW: p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//          p ← p − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps)
//   SGD:   p ← p − lr·(g + wd·p)
// Memory: param, m, v updated in place (one read and one write each), grad read once.
#include "common/device.cuh"
#include "optim/optim.cuh"

namespace deltatune::kernels {
namespace {

__global__ void adamw_kernel(float* p, KIn g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                             float wd, float bc1, float sqrt_bc2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = ld(g, i);
    float pi = p[i] * (1.f - lr * wd);
    const float mi = b1 * m[i] + (1.f - b1) * gi;
    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    pi -= (lr / bc1) * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    p[i] = pi;
  }
}

__global__ void sgd_kernel(float* p, KIn g, int64_t n, float lr, float wd) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] -= lr * (ld(g, i) + wd * p[i]);
}

}  // namespace

cudaError_t launch_adamw(float* param, KIn grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float bc1, float bc2, cudaStream_t s) {
  if (n > 0)
    adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1,
                                                  sqrtf(bc2));
  return cudaGetLastError();
}
cudaError_t launch_sgd(float* param, KIn grad, int64_t n, float lr, float weight_decay, cudaStream_t s) {
  if (n > 0) sgd_kernel<<<grid_for(n, 256), 256, 0, s>>>(param, grad, n, lr, weight_decay);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
