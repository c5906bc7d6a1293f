// Host entry of the wgmma layout check (common/wgmma_check.cu; needs a compute capability 9 GPU).
#pragma once
#include <cuda_runtime.h>

namespace deltatune::kernels {
// C = A·Bᵀ (64 x 64 x 64, exact in bf16 / fp32) by one warpgroup from core-layout tiles, A and B each K-major
// or MN-major: max |C − reference| as read through the accumulator layout, and of bf16(C) stored transposed
// by stmatrix into a core-layout tile.
cudaError_t wgmma_check_m64n64(bool a_mn_major, bool b_mn_major, double* max_err, double* max_err_transposed);
}  // namespace deltatune::kernels
