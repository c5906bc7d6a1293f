// Reference (host, fp32 arithmetic) quantization of frozen base matrices, and their dequantization: the CPU
// backend's path and the CUDA kernels' yardstick.
#pragma once
#include <cstdint>

#include "core/quantized.h"

namespace deltatune {

// float8_e4m3fn (bias 7, no infinities, 0x7f/0xff NaN, max 448), as torch and safetensors' F8_E4M3.
float fp8_e4m3_to_f32(uint8_t v);
// Round to nearest even, saturating at +-448 (transformers' quantizer clamps to the range before the cast);
// NaN stays NaN.
uint8_t f32_to_fp8_e4m3(float f);

// `w` a host float matrix [rows, cols] (F32/BF16/F16). FP8 follows transformers' fine-grained FP8 quantizer
// (per 128x128 block: scale = 448 / max|w|, values clamp(w * scale) in e4m3, scale_inv = 1 / scale); NF4
// bitsandbytes' quantize_4bit(blocksize=64, quant_type="nf4", compress_statistics=True).
QuantizedWeight quantize_host(const Tensor& w, QuantFormat format);
// An FP8 checkpoint matrix: `values` the F8_E4M3 bytes [rows, cols] (read as U8), `scale_inv` F32/BF16 block
// scales [ceil(rows/128), ceil(cols/128)].
QuantizedWeight fp8_weight_host(const Tensor& values, const Tensor& scale_inv);
// out[rows * cols] (=) the dequantized matrix of a host quantized weight, in fp32.
void dequantize_host(const QuantizedWeight& q, float* out);
// Host F32 [rows, cols] copy of a host quantized weight.
Tensor dequantize_host(const QuantizedWeight& q);

}  // namespace deltatune
