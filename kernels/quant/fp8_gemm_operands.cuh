// Operands of the block-scaled FP8 GEMM (cuBLASLt's VEC128_32F and BLK128x128_32F scaling modes, sm_90): the
// activations quantized per row and 128 columns, and the transposed weight for the backward product. Scale
// tensors are in the GEMM's layout: a 1x128 scale tensor holds for each 128-column group the scales of all rows
// ([cols/128][scale_ld], scale_ld >= rows, a multiple of 4); a 128x128 one holds for each 128-row block the
// scales of its column blocks ([rows/128][scale_ld], scale_ld >= cols/128, a multiple of 4). Several matrices
// may be written side by side into one operand (a product summed over a concatenated reduced dimension): the
// launchers take the destination's row stride, and the caller offsets the destination pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x [rows, cols] (cols a multiple of 128): per row r and 128-column group g, amax = max|x[r, g]|,
// values[r * values_ld + c] (=) e4m3(clamp(x[r, c] * 448 / amax)), scales[g * scale_ld + r] (=) amax / 448
// (1 where amax is 0). values_ld a multiple of 8.
cudaError_t launch_fp8_quantize_rows(KIn x, int64_t rows, int64_t cols, uint8_t* values, int64_t values_ld,
                                     float* scales, int64_t scale_ld, cudaStream_t s);
// values_t[c * out_ld + r] (=) values[r, c] for values [rows, cols] (rows and cols multiples of 64, out_ld of 4).
cudaError_t launch_fp8_transpose(const uint8_t* values, int64_t rows, int64_t cols, uint8_t* values_t,
                                 int64_t out_ld, cudaStream_t s);
// The [nrb, ncb] block scales of a weight laid out for the GEMM: out[i * out_ld + j] (=) in[i, j], or in[j, i]
// when `transpose` (then out holds ncb rows of nrb); columns past those are not written (the caller zeroes the
// padding).
cudaError_t launch_fp8_block_scales(const float* in, int64_t nrb, int64_t ncb, bool transpose, float* out,
                                    int64_t out_ld, cudaStream_t s);

}  // namespace deltatune::kernels
