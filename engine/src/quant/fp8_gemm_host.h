// Reference (host, fp32) of the FP8 product QuantOps::fp8_gemm: the activations quantized to e4m3 per row and
// 128 columns (scale = 448 / max|x| of the group, as the CUDA kernel and transformers' act_quant do), times the
// dequantized FP8 weight.
#pragma once
#include "core/quantized.h"

namespace deltatune {

// x a host float matrix [n, k] (k a multiple of 128); w a host FP8 weight. Returns F32 [n, m]:
// dq(x)·Wᵀ (trans_w: W [m, k]) or dq(x)·W (W [k, m]).
Tensor fp8_gemm_host(const Tensor& x, const QuantizedWeight& w, bool trans_w);

}  // namespace deltatune
