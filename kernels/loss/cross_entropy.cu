// Cross-entropy over rows of logits (T, V), fp32 math, one block per row:
//   lse = log Σ_v exp(x_v);  loss_acc (+=) Σ_rows (lse − x_label)  (ignored rows skipped)
//   dlogits (=) grad_scale·(exp(x − lse) − onehot(label)), 0 for ignored rows.
// Memory: pass 1 reads the row once with an online (max, sum) pair per thread; pass 2 reads and writes it
// once. dlogits may alias logits: every element is read and written by the same thread, and the label's
// logit is read before the barrier that precedes pass 2.
#include "common/device.cuh"
#include "loss/loss.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

// Block-wide (max, sum) merge; every thread gets the result.
__device__ void block_lse(float& m, float& s, float* sm, float* ss) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) { sm[warp] = m; ss[warp] = s; }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < nw; ++w) lse_merge(m, s, sm[w], ss[w]);
}

__global__ void ce_kernel(KIn x, int64_t V, const int32_t* labels, float grad_scale, const float* grad_scale_dev,
                          KOut d, double* loss_acc) {
  __shared__ float sm[32], ss[32];
  __shared__ float xlab;
  const int64_t row = blockIdx.x, base = row * V;
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex;
  const bool bad = !ignored && (lab < 0 || lab >= V);
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    const float v = ld(x, base + c);
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else s += expf(v - m);
  }
  if (threadIdx.x == 0) xlab = (!ignored && !bad) ? ld(x, base + lab) : 0.f;
  block_lse(m, s, sm, ss);  // contains barriers: xlab visible, all reads of pass 1 done
  const float lse = m + logf(s);
  if (threadIdx.x == 0 && !ignored) atomicAdd(loss_acc, bad ? double(NAN) : double(lse - xlab));
  if (d.p == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    float g = 0.f;
    if (!ignored) g = grad_scale * (expf(ld(x, base + c) - lse) - (c == lab ? 1.f : 0.f));
    st(d, base + c, g);
  }
}

// The same for F32 logits with V % 4 == 0 (the linear cross-entropy's chunks): 16-byte loads and 1024 threads
// per row (a 248K-vocabulary row is 1 MB: more loads in flight per block). A thread
// writes exactly the elements it read, so dlogits may alias logits here too.
__global__ void ce_f32x4_kernel(const float* x, int64_t V, const int32_t* labels, float grad_scale,
                                const float* grad_scale_dev, KOut d, double* loss_acc) {
  __shared__ float sm[32], ss[32];
  __shared__ float xlab;
  const int64_t row = blockIdx.x, base = row * V;
  const float4* x4 = reinterpret_cast<const float4*>(x + base);
  const int64_t V4 = V / 4;
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex;
  const bool bad = !ignored && (lab < 0 || lab >= V);
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < V4; c += blockDim.x) {
    const float4 v = x4[c];
    const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (vm > m) {
      s *= expf(m - vm);
      m = vm;
    }
    s += expf(v.x - m) + expf(v.y - m) + expf(v.z - m) + expf(v.w - m);
  }
  if (threadIdx.x == 0) xlab = (!ignored && !bad) ? x[base + lab] : 0.f;
  block_lse(m, s, sm, ss);
  const float lse = m + logf(s);
  if (threadIdx.x == 0 && !ignored) atomicAdd(loss_acc, bad ? double(NAN) : double(lse - xlab));
  if (d.p == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  for (int64_t c = threadIdx.x; c < V4; c += blockDim.x) {
    const float4 v = x4[c];
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = 4 * c + j;
      const float g = ignored ? 0.f : grad_scale * (expf(e[j] - lse) - (col == lab ? 1.f : 0.f));
      st(d, base + col, g);
    }
  }
}

}  // namespace

cudaError_t launch_cross_entropy(KIn logits, int64_t T, int64_t V, const int32_t* labels, float grad_scale,
                                 const float* grad_scale_dev, KOut dlogits, double* loss_acc, cudaStream_t s) {
  if (T <= 0) return cudaSuccess;
  const bool x4 = logits.t == KType::F32 && V % 4 == 0 && reinterpret_cast<uintptr_t>(logits.p) % 16 == 0;
  if (x4)
    ce_f32x4_kernel<<<static_cast<unsigned>(T), 4 * kThreads, 0, s>>>(static_cast<const float*>(logits.p), V, labels,
                                                                   grad_scale, grad_scale_dev, dlogits, loss_acc);
  else
    ce_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(logits, V, labels, grad_scale, grad_scale_dev, dlogits,
                                                             loss_acc);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
