// Quantized frozen base on the CUDA backend: quantize at upload (one matrix in full precision on the device at a
// time), dequantize into the caller's scratch right before a GEMM (kernels/quant).
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "quant/codebooks.h"
#include "quant/quant.cuh"

namespace deltatune::cuda {

namespace {
kernels::Nf4Code nf4_code() {
  kernels::Nf4Code c;
  std::copy(nf4_codebook().begin(), nf4_codebook().end(), c.v);
  return c;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

std::shared_ptr<const QuantizedWeight> CudaBackend::upload_quantized(const QuantizedWeight& h) {
  check(h.values.device == Device::CPU, "internal: upload_quantized of a weight that is not on the host");
  auto q = std::make_shared<QuantizedWeight>();
  q->format = h.format;
  q->shape = h.shape;
  q->values = upload(h.values, h.values.dtype);
  q->scales = upload(h.scales, h.scales.dtype);
  if (h.absmax2.defined()) q->absmax2 = upload(h.absmax2, DType::F32);
  if (h.code2.defined()) q->code2 = upload(h.code2, DType::F32);
  q->offset = h.offset;
  return q;
}

std::shared_ptr<const QuantizedWeight> CudaBackend::upload_quantized(const Tensor& host, QuantFormat format) {
  check(host.device == Device::CPU && host.ndim() == 2,
        "CUDA backend: upload_quantized needs a host matrix, got " + shape_str(host.shape));
  check(format != QuantFormat::None, "internal: upload_quantized with format none");
  auto q = std::make_shared<QuantizedWeight>();
  q->format = format;
  q->shape = host.shape;
  const int64_t rows = host.dim(0), cols = host.dim(1), n = rows * cols;
  // The one full-precision copy: this matrix as stored (BF16 checkpoints: no conversion on the host).
  const Tensor w = upload(host, host.dtype == DType::F16 || host.dtype == DType::F32 ? host.dtype : DType::BF16);
  if (format == QuantFormat::FP8) {
    q->values = alloc({rows, cols}, DType::U8);
    q->scales = alloc({ceil_div(rows, kFp8Block), ceil_div(cols, kFp8Block)}, DType::F32);
    cuda_check(kernels::launch_fp8_quantize(kin(w, "weight"), rows, cols, q->values.ptr<uint8_t>(),
                                            q->scales.ptr<float>(), stream()),
               "fp8_quantize");
    return q;
  }
  check(n % 2 == 0, "CUDA backend: NF4 needs an even number of values, got " + shape_str(host.shape));
  const int64_t nb = ceil_div(n, kNf4Block), nb2 = ceil_div(nb, kNf4Block2);
  q->values = alloc({n / 2}, DType::U8);
  q->scales = alloc({nb}, DType::U8);
  q->absmax2 = alloc({nb2}, DType::F32);
  Tensor code2_host = host_tensor({256}, DType::F32);
  std::copy(dynamic_map_signed().begin(), dynamic_map_signed().end(), code2_host.ptr<float>());
  q->code2 = upload(code2_host, DType::F32);
  Tensor absmax = alloc({nb}, DType::F32);
  Tensor mean = alloc({1}, DType::F32);
  cuda_check(kernels::launch_nf4_quantize(kin(w, "weight"), n, nf4_code(), q->values.ptr<uint8_t>(),
                                          absmax.ptr<float>(), stream()),
             "nf4_quantize");
  cuda_check(kernels::launch_mean(absmax.ptr<float>(), nb, mean.ptr<float>(), stream()), "nf4 absmax mean");
  q->offset = download(mean, DType::F32).ptr<float>()[0];  // a host value: the dequantize launches take it
  cuda_check(kernels::launch_nf4_double_quantize(absmax.ptr<float>(), nb, q->offset, q->code2.ptr<float>(),
                                                 q->scales.ptr<uint8_t>(), q->absmax2.ptr<float>(), stream()),
             "nf4_double_quantize");
  return q;
}

void CudaBackend::dequantize(const QuantizedWeight& q, Tensor& out) {
  check(q.values.device == Device::CUDA, "CUDA backend: dequantize of a weight that is not on the GPU");
  check(out.numel() == q.rows() * q.cols(),
        "CUDA backend: dequantize " + shape_str(q.shape) + " into " + shape_str(out.shape));
  if (q.format == QuantFormat::FP8) {
    cuda_check(kernels::launch_fp8_dequantize(q.values.ptr<uint8_t>(), q.scales.ptr<float>(), q.rows(), q.cols(),
                                              kout(out, "out"), stream()),
               "fp8_dequantize");
    return;
  }
  cuda_check(kernels::launch_nf4_dequantize(q.values.ptr<uint8_t>(), q.scales.ptr<uint8_t>(), q.absmax2.ptr<float>(),
                                            q.code2.ptr<float>(), q.offset, nf4_code(), q.rows() * q.cols(),
                                            kout(out, "out"), stream()),
             "nf4_dequantize");
}

}  // namespace deltatune::cuda
