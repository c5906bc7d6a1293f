// Pieces of the chunked linear cross-entropy (the caller runs the lm_head GEMM per column chunk), fp32:
//   lse_update:  per row, (m, l) ← merge((m, l), (max_c x_c, Σ_c exp(x_c − max))) over the chunk's columns;
//                xlab (=) x_label if the label falls in [v0, v0+Vc)
//   lse_finish:  lse (=) m + log l;  loss_acc (+=) Σ (lse − xlab) over non-ignored rows
//   grad_chunk:  dl (=) grad_scale·(exp(x − lse) − onehot), 0 for ignored rows
// Memory: one block per row for the chunk kernels (each logit read once, dl written once); the full
// (T, V) logits never exist, only (n, Vc).
#include "common/device.cuh"
#include "loss/loss.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__global__ void lse_update_kernel(const float* x, int64_t Vc, int64_t v0, const int32_t* labels, float* mrow,
                                  float* lrow, float* xlab) {
  __shared__ float sm[32], ss[32];
  const int64_t row = blockIdx.x, base = row * Vc;
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < Vc; c += blockDim.x) {
    const float v = x[base + c];
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else s += expf(v - m);
  }
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { sm[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = mrow[row], S = lrow[row];
    for (int w = 0; w < nw; ++w) merge(M, S, sm[w], ss[w]);
    mrow[row] = M;
    lrow[row] = S;
    const int64_t lab = labels[row];
    if (lab >= v0 && lab < v0 + Vc) xlab[row] = x[base + (lab - v0)];
  }
}

__global__ void lse_finish_kernel(int64_t n, int64_t V, const int32_t* labels, const float* m, const float* l,
                                  const float* xlab, float* lse, double* loss_acc) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float L = m[i] + logf(l[i]);
    lse[i] = L;
    const int32_t lab = labels[i];
    if (lab == kIgnoreIndex) continue;
    acc += (lab < 0 || lab >= V) ? double(NAN) : double(L - xlab[i]);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(loss_acc, acc);
}

__global__ void grad_chunk_kernel(const float* x, int64_t Vc, int64_t v0, const int32_t* labels, const float* lse,
                                  float grad_scale, KOut dl) {
  const int64_t row = blockIdx.x, base = row * Vc;
  const int32_t lab = labels[row];
  const float L = lse[row];
  for (int64_t c = threadIdx.x; c < Vc; c += blockDim.x) {
    float g = 0.f;
    if (lab != kIgnoreIndex) g = grad_scale * (expf(x[base + c] - L) - (v0 + c == lab ? 1.f : 0.f));
    st(dl, base + c, g);
  }
}

}  // namespace

cudaError_t launch_lse_update(const float* logits, int64_t n, int64_t Vc, int64_t v0, const int32_t* labels, float* m,
                              float* l, float* xlab, cudaStream_t s) {
  if (n > 0) lse_update_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, Vc, v0, labels, m, l, xlab);
  return cudaGetLastError();
}
cudaError_t launch_lse_finish(int64_t n, int64_t V, const int32_t* labels, const float* m, const float* l,
                              const float* xlab, float* lse, double* loss_acc, cudaStream_t s) {
  if (n > 0) lse_finish_kernel<<<1, 256, 0, s>>>(n, V, labels, m, l, xlab, lse, loss_acc);
  return cudaGetLastError();
}
cudaError_t launch_ce_grad_chunk(const float* logits, int64_t n, int64_t Vc, int64_t v0, const int32_t* labels,
                                 const float* lse, float grad_scale, KOut dl, cudaStream_t s) {
  if (n > 0) grad_chunk_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, Vc, v0, labels, lse, grad_scale, dl);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
