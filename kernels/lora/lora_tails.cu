// The rank-r tails of K-concatenated base weights (model/lora_linear.cpp: y = [x | u]·[W | s·B]ᵀ): each module's
// s·B [rows, r] written into a column block of its padded weight (bf16), up to kLoraTailsMax modules a launch.
#include <cuda_bf16.h>

#include "common/device.cuh"
#include "lora/lora_tails.cuh"

namespace deltatune::kernels {
namespace {

__global__ void lora_tails_kernel(LoraTailsArgs a) {
  const LoraTailsArgs::One& m = a.m[blockIdx.y];
  const int64_t n = m.rows * a.r;
  auto* dst = static_cast<__nv_bfloat16*>(m.dst);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / a.r, c = i % a.r;
    dst[row * m.ld + c] = __float2bfloat16_rn(m.alpha * ld(m.src, i));
  }
}

}  // namespace

cudaError_t launch_lora_tails(const LoraTailsArgs& a, cudaStream_t s) {
  if (a.n <= 0) return cudaSuccess;
  if (a.n > kLoraTailsMax || a.r <= 0) return cudaErrorInvalidValue;
  int64_t most = 0;
  for (int i = 0; i < a.n; ++i) most = most > a.m[i].rows * a.r ? most : a.m[i].rows * a.r;
  const unsigned blocks = grid_for(most, 256, 1024);
  lora_tails_kernel<<<dim3(blocks, static_cast<unsigned>(a.n)), 256, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace deltatune::kernels
