// Ops on frozen base matrices held quantized (core/quantized.h), beside the Backend interface: the CPU
// reference (quant/quantize_host) and the CUDA kernels (kernels/quant).
#pragma once
#include <memory>
#include <span>

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
  // Whether this backend multiplies `w` as FP8 (block-scaled FP8 GEMMs; an FP8 weight whose dimensions are
  // multiples of 128): fp8_gemm_shared and fp8_gemm_sum may take it (cuBLASLt may still refuse a row count).
  virtual bool fp8_gemm_takes(const QuantizedWeight& w) = 0;
  // ys[i] (=) x·W_iᵀ + beta·ys[i] for every i, x quantized to e4m3 once (per row and 128 columns, as
  // transformers' FP8Linear does) for all of them. false, with nothing enqueued, where any W_i has no FP8
  // product here: the caller dequantizes and multiplies in bf16.
  virtual bool fp8_gemm_shared(const Tensor& x, std::span<const QuantizedWeight* const> ws,
                               std::span<Tensor* const> ys, float beta) = 0;
  // y (=) Σ_i x_i·W_i + beta·y as one FP8 product over the concatenated reduced dimension (the backward of
  // modules that share an input: dx = Σ dy_i·W_i). false, with nothing enqueued, as fp8_gemm_shared.
  virtual bool fp8_gemm_sum(std::span<const Tensor* const> xs, std::span<const QuantizedWeight* const> ws, Tensor& y,
                            float beta) = 0;
  // A frozen table that stays in host memory and that this backend's ops still read (embedding_fwd): the
  // embedding table of a quantized base with an untied head, read a few rows a step, never in a GEMM, with no
  // gradient. `host` converted to `dtype`. CUDA: page-locked host memory mapped into the device's address space,
  // so the gather reads the rows over the bus, with no host work a step and no device memory; CPU: an owned
  // copy (the checkpoint's may be a file mapping whose pages the OS can drop, and every step would read disk).
  virtual Tensor host_resident_table(const Tensor& host, DType dtype) = 0;
  // y (=) x·Wᵀ (trans_w) or x·W, plus beta·y: fp8_gemm_shared or fp8_gemm_sum of the one matrix.
  bool fp8_gemm(const Tensor& x, const QuantizedWeight& w, bool trans_w, Tensor& y, float beta);
};

// The quantized-weight ops of `be`; throws Error naming the backend when it has none.
QuantOps& quant_ops(Backend& be);

}  // namespace deltatune
