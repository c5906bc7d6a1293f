// Row combine of the expert outputs back to tokens and a 3-D axis permutation (expert LoRA B regrouping).
//   combine:  out[t, c] (=) Σ_{j<K} w[t,j]·y[slot_row[t·K+j], c], j in order (fp32 sum, no atomics)
//   permute3: dst[i0, i1, i2] (=) src at the source coordinates (dst axis a = src axis p[a])
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

__global__ void combine_kernel(KIn y, const int32_t* slot_row, const float* w, int64_t T, int K, int64_t H, KOut out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, c = i % H;
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
      const int64_t s = t * K + j;
      acc += (w ? w[s] : 1.f) * ld(y, int64_t(slot_row[s]) * H + c);
    }
    st(out, i, acc);
  }
}

__global__ void permute3_kernel(KIn src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2, KOut dst) {
  const int64_t d[3] = {d0, d1, d2};
  const int64_t stride[3] = {d1 * d2, d2, 1};
  const int64_t o1 = d[p1], o2 = d[p2], n = d0 * d1 * d2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i2 = i % o2, i1 = (i / o2) % o1, i0 = i / (o1 * o2);
    st(dst, i, ld(src, i0 * stride[p0] + i1 * stride[p1] + i2 * stride[p2]));
  }
}

}  // namespace

cudaError_t launch_moe_combine(KIn y, const int32_t* slot_row, const float* w, int64_t T, int K, int64_t H, KOut out,
                               cudaStream_t s) {
  if (T * H > 0) combine_kernel<<<grid_for(T * H, 256), 256, 0, s>>>(y, slot_row, w, T, K, H, out);
  return cudaGetLastError();
}

cudaError_t launch_permute3(KIn src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2, KOut dst,
                            cudaStream_t s) {
  const int64_t n = d0 * d1 * d2;
  if (n > 0) permute3_kernel<<<grid_for(n, 256), 256, 0, s>>>(src, d0, d1, d2, p0, p1, p2, dst);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
