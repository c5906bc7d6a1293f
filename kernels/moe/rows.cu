// Row gather/scatter helpers for MoE dispatch and the embedding lookup, fp32 math:
//   gather:      dst[i] (=) src[rows[i]]            (embedding: rows = token ids)
//   scatter_add: dst[rows[i]] (+=) scale[i]·src[i]  (atomicAdd: rows may repeat; BF16 dst uses bf16 atomics)
//   row_dot:     out[i] (=) Σ_c a[i,c]·b[i,c]
//   scale_rows:  y[i] (=) x[i]·s[i]
#include "common/device.cuh"
#include "moe/moe.cuh"

namespace deltatune::kernels {
namespace {

__global__ void gather_kernel(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / H, c = e % H;
    const int64_t r = rows[i];
    st(dst, e, (r >= 0 && r < src_rows) ? ld(src, r * H + c) : 0.f);
  }
}

__global__ void scatter_add_kernel(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H, KOut dst,
                                   int64_t dst_rows) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / H, c = e % H;
    const int64_t r = rows[i];
    if (r < 0 || r >= dst_rows) continue;
    const float val = ld(src, e) * (scale ? scale[i] : 1.f);
    const int64_t o = r * H + c;
    switch (dst.t) {
      case KType::BF16: atomicAdd(static_cast<__nv_bfloat16*>(dst.p) + o, __float2bfloat16_rn(val)); break;
      case KType::F16: atomicAdd(static_cast<__half*>(dst.p) + o, __float2half_rn(val)); break;
      default: atomicAdd(static_cast<float*>(dst.p) + o, val); break;
    }
  }
}

// One warp per row.
__global__ void row_dot_kernel(KIn a, KIn b, int64_t n, int64_t H, float* out) {
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (i >= n) return;
  float acc = 0.f;
  for (int64_t c = lane; c < H; c += 32) acc += ld(a, i * H + c) * ld(b, i * H + c);
  acc = warp_sum(acc);
  if (lane == 0) out[i] = acc;
}

__global__ void scale_rows_kernel(KIn x, const float* sc, int64_t n, int64_t H, KOut y) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * H; e += int64_t(gridDim.x) * blockDim.x)
    st(y, e, ld(x, e) * sc[e / H]);
}

}  // namespace

cudaError_t launch_gather_rows(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst,
                               cudaStream_t s) {
  if (n * H > 0) gather_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(src, src_rows, rows, n, H, dst);
  return cudaGetLastError();
}
cudaError_t launch_scatter_add_rows(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H, KOut dst,
                                    int64_t dst_rows, cudaStream_t s) {
  if (n * H > 0) scatter_add_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(src, rows, scale, n, H, dst, dst_rows);
  return cudaGetLastError();
}
cudaError_t launch_row_dot(KIn a, KIn b, int64_t n, int64_t H, float* out, cudaStream_t s) {
  if (n > 0) row_dot_kernel<<<grid_for(n * 32, 256, int64_t(1) << 30), 256, 0, s>>>(a, b, n, H, out);
  return cudaGetLastError();
}
cudaError_t launch_scale_rows(KIn x, const float* sc, int64_t n, int64_t H, KOut y, cudaStream_t s) {
  if (n * H > 0) scale_rows_kernel<<<grid_for(n * H, 256), 256, 0, s>>>(x, sc, n, H, y);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
