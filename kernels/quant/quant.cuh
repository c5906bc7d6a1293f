// Launchers for the quantized frozen base (quant.cu): quantize a matrix on the device at load, and dequantize
// it into a plain matrix right before its GEMM. Formats as in engine/src/core/quantized.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

struct Nf4Code {
  float v[16];  // the NF4 codebook, ascending
};

// FP8 (128x128 blocks): values (=) e4m3(clamp(w * 448 / amax)), scale_inv (=) amax / 448 per block (1 if amax 0).
cudaError_t launch_fp8_quantize(KIn w, int64_t rows, int64_t cols, uint8_t* values, float* scale_inv, cudaStream_t s);
// out[r, c] (=) e4m3(values[r, c]) * scale_inv[r / 128, c / 128].
cudaError_t launch_fp8_dequantize(const uint8_t* values, const float* scale_inv, int64_t rows, int64_t cols, KOut out,
                                  cudaStream_t s);

// NF4, first pass: per 64-value block absmax[b] (=) max|w| and the packed codebook indices (high nibble first).
cudaError_t launch_nf4_quantize(KIn w, int64_t n, Nf4Code code, uint8_t* packed, float* absmax, cudaStream_t s);
// *offset (=) mean of absmax[0..nb).
cudaError_t launch_mean(const float* x, int64_t n, float* mean, cudaStream_t s);
// Double quantization: per 256 absmax, absmax2 (=) max|absmax - offset|, qabsmax (=) the nearest code2 index of
// (absmax - offset) / absmax2 (code2: 256 ascending values on the device).
cudaError_t launch_nf4_double_quantize(const float* absmax, int64_t nb, float offset, const float* code2,
                                       uint8_t* qabsmax, float* absmax2, cudaStream_t s);
// out[i] (=) code[index i] * (code2[qabsmax[i / 64]] * absmax2[i / 16384] + offset).
cudaError_t launch_nf4_dequantize(const uint8_t* packed, const uint8_t* qabsmax, const float* absmax2,
                                  const float* code2, float offset, Nf4Code code, int64_t n, KOut out, cudaStream_t s);

}  // namespace deltatune::kernels
