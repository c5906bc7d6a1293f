// MoE top-k router (spec §3.8, §3.10), one block per token, fp32 math:
//   forward:  p = softmax(logits);  idx (=) top-k of p (ties: lower expert index first);
//             w (=) p_idx / Σ_k p_idx   (= softmax restricted to the selected logits)
//   backward: for selected j: dl_j (=) w_j·(dw_j − Σ_i w_i·dw_i); dl (=) 0 elsewhere
// Memory: the logits row lives in shared memory (E floats); k rounds of a block arg-max.
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void router_fwd_kernel(KIn logits, int E, int k, int32_t* idx, float* w) {
  extern __shared__ float row[];  // (E)
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  __shared__ float sel_v[64];
  const int64_t t = blockIdx.x;
  for (int e = threadIdx.x; e < E; e += blockDim.x) row[e] = ld(logits, t * E + e);
  __syncthreads();
  // Top-k on the logits equals top-k on the softmax (monotone), so the full softmax is not needed.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      const float x = row[e];
      if (x > bv || (x == bv && e < bi)) { bv = x; bi = e; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { red_v[warp] = bv; red_i[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = red_v[0];
      int i = red_i[0];
      for (int q = 1; q < nw; ++q)
        if (red_v[q] > v || (red_v[q] == v && red_i[q] < i)) { v = red_v[q]; i = red_i[q]; }
      if (i < 0 || i >= E) i = 0;  // all -inf/NaN row: pick expert 0
      idx[t * k + j] = i;
      sel_v[j] = row[i];
      row[i] = -INFINITY;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float mx = -INFINITY;
    for (int j = 0; j < k; ++j) mx = fmaxf(mx, sel_v[j]);
    float sum = 0.f;
    for (int j = 0; j < k; ++j) sum += expf(sel_v[j] - mx);
    for (int j = 0; j < k; ++j) w[t * k + j] = expf(sel_v[j] - mx) / sum;
  }
}

__global__ void router_bwd_kernel(const float* dw, const int32_t* idx, const float* w, int E, int k, KOut dl) {
  const int64_t t = blockIdx.x;
  for (int e = threadIdx.x; e < E; e += blockDim.x) st(dl, t * E + e, 0.f);
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += w[t * k + j] * dw[t * k + j];
    for (int j = 0; j < k; ++j) st(dl, t * E + idx[t * k + j], w[t * k + j] * (dw[t * k + j] - s));
  }
}

}  // namespace

cudaError_t launch_moe_router_fwd(const KernelPolicy& pol, KIn logits, int64_t T, int E, int k, int32_t* idx,
                                  float* w, cudaStream_t s) {
  if (k > 64) return cudaErrorInvalidValue;
  if (!default_smem_fits(pol, sizeof(float) * E)) return cudaErrorInvalidConfiguration;
  if (T > 0)
    router_fwd_kernel<<<static_cast<unsigned>(T), kThreads, sizeof(float) * E, s>>>(logits, E, k, idx, w);
  return cudaGetLastError();
}
cudaError_t launch_moe_router_bwd(const float* dw, const int32_t* idx, const float* w, int64_t T, int E, int k,
                                  KOut dl, cudaStream_t s) {
  if (T > 0) router_bwd_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(dw, idx, w, E, k, dl);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
