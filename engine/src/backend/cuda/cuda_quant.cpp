// Quantized frozen base on the CUDA backend: quantize at upload (one matrix in full precision on the device at a
// time), dequantize into the caller's scratch right before a GEMM (kernels/quant), or multiply FP8 weights as FP8
// (block-scaled cuBLASLt GEMMs, fp8_block_gemm.h) where the kernel policy has them.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_block_gemm.h"
#include "core/error.h"
#include "quant/codebooks.h"
#include "quant/fp8_gemm_operands.cuh"
#include "quant/quant.cuh"

namespace deltatune::cuda {

namespace {
kernels::Nf4Code nf4_code() {
  kernels::Nf4Code c;
  std::copy(nf4_codebook().begin(), nf4_codebook().end(), c.v);
  return c;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
bool aligned256(const void* p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0; }
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

// The weight as cuBLASLt's A operand [m, k] (k the reduced dimension): as stored for x·Wᵀ, transposed into a
// scratch for x·W (the backward's dx = dy·W); its block scales laid out [m/128][round_up(k/128, 4)].
bool CudaBackend::fp8_gemm(const Tensor& x, const QuantizedWeight& q, bool trans_w, Tensor& y, float beta) {
  if (!policy_.fp8_block_gemm() || q.format != QuantFormat::FP8 || y.dtype != DType::BF16) return false;
  const int64_t rows = q.rows(), cols = q.cols();
  if (rows % kFp8Block != 0 || cols % kFp8Block != 0) return false;
  const int64_t m = trans_w ? rows : cols, k = trans_w ? cols : rows, n = x.rows();
  check(x.cols() == k && y.rows() == n && y.cols() == m,
        "fp8_gemm: x " + shape_str(x.shape) + (trans_w ? " · Wᵀ, W " : " · W, W ") + shape_str(q.shape) +
            " into y " + shape_str(y.shape));
  if (n == 0 || n >= INT32_MAX) return false;
  if (!fp8_gemm_) fp8_gemm_ = std::make_unique<Fp8BlockGemm>(cublas_ws_.data, cublas_ws_.nbytes());
  // Row counts cuBLASLt takes no algorithm for run padded (zero rows) to a multiple of 16, or of 128, through
  // an output scratch, as does an output that is not 256-byte aligned (a view into a larger tensor).
  int64_t n_run = n;
  for (int64_t pad : {int64_t(1), int64_t(16), int64_t(128)}) {
    n_run = round_up(n, pad);
    if (fp8_gemm_->supports(m, n_run, k, beta != 0.f)) break;
    if (pad == 128) return false;
  }
  const bool direct = n_run == n && aligned256(y.data);
  const int64_t kb = k / kFp8Block, w_ld = round_up(kb, 4);
  Tensor wt, ws;
  const uint8_t* wv = q.values.ptr<uint8_t>();
  const float* wsp = q.scales.ptr<float>();
  if (!trans_w) {
    wt = alloc({cols, rows}, DType::U8);
    cuda_check(kernels::launch_fp8_transpose(wv, rows, cols, wt.ptr<uint8_t>(), stream()), "fp8_transpose");
    wv = wt.ptr<uint8_t>();
  }
  if (!trans_w || w_ld != kb) {
    ws = alloc({m / kFp8Block, w_ld}, DType::F32);
    cuda_check(kernels::launch_fp8_block_scales(q.scales.ptr<float>(), rows / kFp8Block, cols / kFp8Block,
                                                !trans_w, ws.ptr<float>(), w_ld, stream()),
               "fp8_block_scales");
    wsp = ws.ptr<float>();
  }
  const int64_t x_ld = round_up(n_run, 4);
  Tensor xq = alloc({n_run, k}, DType::U8), xs = alloc({kb, x_ld}, DType::F32);
  if (n_run != n) {
    cuda_check(cudaMemsetAsync(xq.data, 0, xq.nbytes(), stream()), "fp8_gemm: padding rows");
    cuda_check(cudaMemsetAsync(xs.data, 0, xs.nbytes(), stream()), "fp8_gemm: padding scales");
  }
  cuda_check(kernels::launch_fp8_quantize_rows(kin(x, "fp8_gemm: x"), n, k, xq.ptr<uint8_t>(),
                                               xs.ptr<float>(), x_ld, stream()),
             "fp8_quantize_rows");
  Tensor out = direct ? y : alloc({n_run, m}, DType::BF16);
  const size_t y_bytes = size_t(n) * size_t(m) * 2;
  if (!direct && beta != 0.f)
    cuda_check(cudaMemcpyAsync(out.data, y.data, y_bytes, cudaMemcpyDeviceToDevice, stream()),
               "fp8_gemm: y in");
  Fp8BlockGemmArgs a;
  a.w = wv, a.w_scales = wsp, a.x = xq.ptr<uint8_t>(), a.x_scales = xs.ptr<float>(), a.d = out.data;
  a.m = m, a.n = n_run, a.k = k, a.beta = beta;
  fp8_gemm_->run(a, stream());
  if (!direct)
    cuda_check(cudaMemcpyAsync(y.data, out.data, y_bytes, cudaMemcpyDeviceToDevice, stream()),
               "fp8_gemm: y out");
  return true;
}

}  // namespace deltatune::cuda
