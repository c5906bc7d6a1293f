// A frozen base matrix held quantized: the packed values and their scales, all on one device (host tensors on
// the CPU). QuantOps::dequantize (backend/quant_ops.h) turns it back into a plain matrix right before a GEMM.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace deltatune {

enum class QuantFormat : uint8_t {
  None,
  // float8_e4m3fn values [rows, cols] and one F32 weight_scale_inv per 128x128 block
  // [ceil(rows/128), ceil(cols/128)]: w = fp8 * scale_inv (transformers' fine-grained FP8).
  FP8,
  // bitsandbytes NF4 with double quantization, over the row-major flattened matrix: 64-value blocks, two
  // 4-bit codebook indices a byte (the first value in the high nibble); the blocks' absmax stored as 8-bit
  // indices into bitsandbytes' signed dynamic map over 256-absmax blocks, plus the mean absmax (offset):
  // absmax[b] = code2[qabsmax[b]] * absmax2[b / 256] + offset;  w[i] = nf4[index(i)] * absmax[i / 64].
  NF4,
};

const char* quant_format_name(QuantFormat f);  // "none" | "fp8" | "nf4"
// "none" | "fp8" | "nf4" (the run key base_quantization); throws Error naming `what` otherwise.
QuantFormat quant_format_from_name(const std::string& name, const std::string& what);

struct QuantizedWeight {
  QuantFormat format = QuantFormat::None;
  Shape shape;      // the matrix [rows, cols]
  Tensor values;    // FP8: U8 [rows, cols] holding float8_e4m3fn bytes; NF4: U8 [numel / 2]
  Tensor scales;    // FP8: F32 [ceil(rows/128), ceil(cols/128)]; NF4: U8 [ceil(numel / 64)] (qabsmax)
  Tensor absmax2;   // NF4: F32 [ceil(numel / 64 / 256)]
  Tensor code2;     // NF4: F32 [256], bitsandbytes' create_dynamic_map(signed=True)
  float offset = 0; // NF4: mean of the absmax values
  int64_t rows() const { return shape.at(0); }
  int64_t cols() const { return shape.at(1); }
  size_t nbytes() const { return values.nbytes() + scales.nbytes() + absmax2.nbytes() + code2.nbytes(); }
};

constexpr int64_t kFp8Block = 128;     // weight_block_size [128, 128]
constexpr int64_t kNf4Block = 64;      // values per absmax
constexpr int64_t kNf4Block2 = 256;    // absmax values per absmax2

}  // namespace deltatune
