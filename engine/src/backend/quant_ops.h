// Ops on frozen base matrices held quantized (core/quantized.h), beside the Backend interface: the CPU
// reference (quant/quantize_host) and the CUDA kernels (kernels/quant).
#pragma once
#include <memory>

#include "backend/backend.h"
#include "core/quantized.h"

namespace deltatune {

class QuantOps {
 public:
  virtual ~QuantOps() = default;
  // `host` a host float matrix [rows, cols], quantized on the backend in `format` (the only full-precision
  // copy made there is of this one matrix).
  virtual std::shared_ptr<const QuantizedWeight> upload_quantized(const Tensor& host, QuantFormat format) = 0;
  // A host matrix already quantized (an FP8 checkpoint): its parts copied to the backend as they are.
  virtual std::shared_ptr<const QuantizedWeight> upload_quantized(const QuantizedWeight& host) = 0;
  // out (=) w dequantized; w on the backend, out [rows, cols] (any float dtype, any shape of that numel).
  virtual void dequantize(const QuantizedWeight& w, Tensor& out) = 0;
  // y (=) x·Wᵀ (trans_w) or x·W, plus beta·y, multiplied in FP8 where this backend has block-scaled FP8 GEMMs
  // for w (an FP8 weight as stored; x quantized to e4m3 per row and 128 columns, as transformers' FP8Linear
  // does). false, with nothing enqueued, where it has none: the caller dequantizes w and multiplies in bf16.
  virtual bool fp8_gemm(const Tensor& x, const QuantizedWeight& w, bool trans_w, Tensor& y, float beta) = 0;
};

// The quantized-weight ops of `be`; throws Error naming the backend when it has none.
QuantOps& quant_ops(Backend& be);

}  // namespace deltatune
