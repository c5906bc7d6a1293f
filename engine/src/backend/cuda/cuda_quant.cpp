// Quantized frozen base on the CUDA backend: quantize at upload (one matrix in full precision on the device at a
// time), dequantize into the caller's scratch right before a GEMM (kernels/quant), or multiply FP8 weights as FP8
// (block-scaled cuBLASLt GEMMs, fp8_block_gemm.h) where the kernel policy has them.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_block_gemm.h"
#include "core/error.h"
#include "core/lazy_check.h"
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

Tensor CudaBackend::host_resident_table(const Tensor& host, DType dtype) {
  check(host.device == Device::CPU, "internal: host_resident_table of a tensor that is not on the host");
  const Tensor src = host.dtype == dtype ? host : host_convert(host, dtype);
  Tensor t;
  t.shape = host.shape;
  t.dtype = dtype;
  t.device = Device::CUDA;  // the device reads it through its mapping: kernels take it as a device tensor
  if (t.nbytes() == 0) return t;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  void* p = nullptr;
  const std::string what = "cudaHostAlloc: " + std::to_string(t.nbytes() >> 20) +
                           " MiB of page-locked host memory for a " + shape_str(t.shape) + " table kept in host memory";
  cuda_check(cudaHostAlloc(&p, t.nbytes(), cudaHostAllocMapped | cudaHostAllocPortable), what.c_str());
  t.storage = std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  std::memcpy(p, src.data, t.nbytes());
  cuda_check(cudaHostGetDevicePointer(&t.data, p, 0), "cudaHostGetDevicePointer (host-resident table)");
  return t;
}

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
        [&] { return "CUDA backend: upload_quantized needs a host matrix, got " + shape_str(host.shape); });
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
  check(n % 2 == 0,
        [&] { return "CUDA backend: NF4 needs an even number of values, got " + shape_str(host.shape); });
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
        [&] { return "CUDA backend: dequantize " + shape_str(q.shape) + " into " + shape_str(out.shape); });
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

bool CudaBackend::fp8_gemm_takes(const QuantizedWeight& q) {
  return policy_.fp8_block_gemm() && q.format == QuantFormat::FP8 && q.values.device == Device::CUDA &&
         q.rows() % kFp8Block == 0 && q.cols() % kFp8Block == 0;
}

int64_t CudaBackend::fp8_run_rows(int64_t n, std::span<const std::pair<int64_t, int64_t>> mk, bool accumulate) {
  if (n == 0 || n >= INT32_MAX) return 0;
  if (!fp8_gemm_) fp8_gemm_ = std::make_unique<Fp8BlockGemm>(cublas_ws_.data, cublas_ws_.nbytes());
  for (int64_t pad : {int64_t(1), int64_t(16), int64_t(128)}) {
    const int64_t n_run = round_up(n, pad);
    if (std::all_of(mk.begin(), mk.end(),
                    [&](const auto& p) { return fp8_gemm_->supports(p.first, n_run, p.second, accumulate); }))
      return n_run;
  }
  return 0;
}

// y [n, m] (=) xq·Aᵀ + beta·y, A [m, k] the weight operand (e4m3 bytes, scales [m/128][round_up(k/128, 4)]),
// xq [n_run, k] with scales xs [k/128][round_up(n_run, 4)]. Padded rows, or an output that is not 256-byte
// aligned (a view into a larger tensor), go through an output scratch.
void CudaBackend::fp8_product(const uint8_t* w, const float* w_scales, const Tensor& xq, const Tensor& xs,
                              int64_t n_run, int64_t m, int64_t k, Tensor& y, float beta) {
  const int64_t n = y.rows();
  const bool direct = n_run == n && aligned256(y.data);
  Tensor out = direct ? y : alloc({n_run, m}, DType::BF16);
  const size_t y_bytes = size_t(n) * size_t(m) * 2;
  if (!direct && beta != 0.f)
    cuda_check(cudaMemcpyAsync(out.data, y.data, y_bytes, cudaMemcpyDeviceToDevice, stream()), "fp8_gemm: y in");
  Fp8BlockGemmArgs a;
  a.w = w, a.w_scales = w_scales, a.x = xq.ptr<uint8_t>(), a.x_scales = xs.ptr<float>(), a.d = out.data;
  a.m = m, a.n = n_run, a.k = k, a.beta = beta;
  if (fp8_gemm_->needs_tuning(a)) {  // timed on a scratch output: the candidates' runs would add into y
    Tensor scratch = alloc({n_run, m}, DType::BF16);
    Fp8BlockGemmArgs t = a;
    t.d = scratch.data;
    fp8_gemm_->tune(t, stream());
  }
  fp8_gemm_->run(a, stream());
  if (!direct)
    cuda_check(cudaMemcpyAsync(y.data, out.data, y_bytes, cudaMemcpyDeviceToDevice, stream()), "fp8_gemm: y out");
}

// The weights as stored are cuBLASLt's A operand [m, k] of x·Wᵀ (k the reduced dimension); x is quantized
// once for all of them.
bool CudaBackend::fp8_gemm_shared(const Tensor& x, std::span<const QuantizedWeight* const> ws,
                                  std::span<Tensor* const> ys, float beta) {
  check(ws.size() == ys.size(), "internal: fp8_gemm_shared needs one output per weight");
  if (ws.empty()) return true;
  const int64_t n = x.rows(), k = x.cols();
  std::vector<std::pair<int64_t, int64_t>> mk;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!fp8_gemm_takes(*ws[i]) || ys[i]->dtype != DType::BF16) return false;
    check(ws[i]->cols() == k && ys[i]->rows() == n && ys[i]->cols() == ws[i]->rows(), [&] {
      return "fp8_gemm: x " + shape_str(x.shape) + " · Wᵀ, W " + shape_str(ws[i]->shape) + " into y " +
             shape_str(ys[i]->shape);
    });
    mk.emplace_back(ws[i]->rows(), k);
  }
  const int64_t n_run = fp8_run_rows(n, mk, beta != 0.f);
  if (n_run == 0) return false;
  const int64_t kb = k / kFp8Block, w_ld = round_up(kb, 4), x_ld = round_up(n_run, 4);
  Tensor xq = alloc({n_run, k}, DType::U8), xs = alloc({kb, x_ld}, DType::F32);
  if (n_run != n) {
    cuda_check(cudaMemsetAsync(xq.data, 0, xq.nbytes(), stream()), "fp8_gemm: padding rows");
    cuda_check(cudaMemsetAsync(xs.data, 0, xs.nbytes(), stream()), "fp8_gemm: padding scales");
  }
  cuda_check(kernels::launch_fp8_quantize_rows(kin(x, "fp8_gemm: x"), n, k, xq.ptr<uint8_t>(), k, xs.ptr<float>(),
                                               x_ld, stream()),
             "fp8_quantize_rows");
  for (size_t i = 0; i < ws.size(); ++i) {
    const QuantizedWeight& q = *ws[i];
    const int64_t m = q.rows();
    Tensor wsc;
    const float* wsp = q.scales.ptr<float>();
    if (w_ld != kb) {  // the scale rows padded to a multiple of 4 columns
      wsc = alloc({m / kFp8Block, w_ld}, DType::F32);
      cuda_check(cudaMemsetAsync(wsc.data, 0, wsc.nbytes(), stream()), "fp8_gemm: padding weight scales");
      cuda_check(kernels::launch_fp8_block_scales(q.scales.ptr<float>(), m / kFp8Block, kb, false, wsc.ptr<float>(),
                                                  w_ld, stream()),
                 "fp8_block_scales");
      wsp = wsc.ptr<float>();
    }
    fp8_product(q.values.ptr<uint8_t>(), wsp, xq, xs, n_run, m, k, *ys[i], beta);
  }
  return true;
}

// y = Σ x_i·W_i: the reduced dimension is the weights' rows, so A is [m, K] = [W_1ᵀ | W_2ᵀ | ...] (K = Σ rows),
// the weights transposed side by side into a scratch, and x_i quantized into its columns of one [n, K] operand.
bool CudaBackend::fp8_gemm_sum(std::span<const Tensor* const> xs_in, std::span<const QuantizedWeight* const> ws,
                               Tensor& y, float beta) {
  check(ws.size() == xs_in.size(), "internal: fp8_gemm_sum needs one input per weight");
  if (ws.empty()) return false;
  if (y.dtype != DType::BF16) return false;
  const int64_t n = y.rows(), m = y.cols();
  int64_t K = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!fp8_gemm_takes(*ws[i])) return false;
    check(ws[i]->cols() == m && xs_in[i]->rows() == n && xs_in[i]->cols() == ws[i]->rows(), [&] {
      return "fp8_gemm: x " + shape_str(xs_in[i]->shape) + " · W, W " + shape_str(ws[i]->shape) + " into y " +
             shape_str(y.shape);
    });
    K += ws[i]->rows();
  }
  const std::pair<int64_t, int64_t> mk[] = {{m, K}};
  const int64_t n_run = fp8_run_rows(n, mk, beta != 0.f);
  if (n_run == 0) return false;
  const int64_t Kb = K / kFp8Block, w_ld = round_up(Kb, 4), x_ld = round_up(n_run, 4);
  Tensor wt = alloc({m, K}, DType::U8), wsc = alloc({m / kFp8Block, w_ld}, DType::F32);
  Tensor xq = alloc({n_run, K}, DType::U8), xsc = alloc({Kb, x_ld}, DType::F32);
  if (w_ld != Kb) cuda_check(cudaMemsetAsync(wsc.data, 0, wsc.nbytes(), stream()), "fp8_gemm: padding weight scales");
  if (n_run != n) {
    cuda_check(cudaMemsetAsync(xq.data, 0, xq.nbytes(), stream()), "fp8_gemm: padding rows");
    cuda_check(cudaMemsetAsync(xsc.data, 0, xsc.nbytes(), stream()), "fp8_gemm: padding scales");
  }
  int64_t off = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const QuantizedWeight& q = *ws[i];
    const int64_t rows = q.rows();
    cuda_check(kernels::launch_fp8_transpose(q.values.ptr<uint8_t>(), rows, m, wt.ptr<uint8_t>() + off, K, stream()),
               "fp8_transpose");
    cuda_check(kernels::launch_fp8_block_scales(q.scales.ptr<float>(), rows / kFp8Block, m / kFp8Block, true,
                                                wsc.ptr<float>() + off / kFp8Block, w_ld, stream()),
               "fp8_block_scales");
    cuda_check(kernels::launch_fp8_quantize_rows(kin(*xs_in[i], "fp8_gemm: x"), n, rows, xq.ptr<uint8_t>() + off, K,
                                                 xsc.ptr<float>() + (off / kFp8Block) * x_ld, x_ld, stream()),
               "fp8_quantize_rows");
    off += rows;
  }
  fp8_product(wt.ptr<uint8_t>(), wsc.ptr<float>(), xq, xsc, n_run, m, K, y, beta);
  return true;
}

}  // namespace deltatune::cuda
