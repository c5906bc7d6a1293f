#include "backend/quant_ops.h"

#include <cstring>

#include "core/error.h"
#include "core/lazy_check.h"
#include "quant/quantize_host.h"

namespace deltatune {

namespace {

// The CPU backend's tensors are host tensors: the reference quantization as it is.
class CpuQuantOps final : public QuantOps {
 public:
  std::shared_ptr<const QuantizedWeight> upload_quantized(const Tensor& host, QuantFormat format) override {
    return std::make_shared<const QuantizedWeight>(quantize_host(host, format));
  }
  std::shared_ptr<const QuantizedWeight> upload_quantized(const QuantizedWeight& host) override {
    return std::make_shared<const QuantizedWeight>(host);
  }
  void dequantize(const QuantizedWeight& w, Tensor& out) override {
    check(out.device == Device::CPU && out.numel() == w.rows() * w.cols(),
          [&] { return "cpu backend: dequantize " + shape_str(w.shape) + " into " + shape_str(out.shape); });
    if (out.dtype == DType::F32) {
      dequantize_host(w, out.ptr<float>());
      return;
    }
    const Tensor f = dequantize_host(w);
    const Tensor c = host_convert(f, out.dtype);
    std::memcpy(out.data, c.data, c.nbytes());
  }
  Tensor host_resident_table(const Tensor& host, DType dtype) override {
    check(host.device == Device::CPU, "internal: host_resident_table of a tensor that is not on the host");
    if (host.dtype != dtype) return host_convert(host, dtype);
    Tensor t = host_tensor(host.shape, dtype);
    std::memcpy(t.data, host.data, host.nbytes());
    return t;
  }
  bool fp8_gemm_takes(const QuantizedWeight&) override { return false; }
  bool fp8_gemm_shared(const Tensor&, std::span<const QuantizedWeight* const>, std::span<Tensor* const>,
                       float) override {
    return false;
  }
  bool fp8_gemm_sum(std::span<const Tensor* const>, std::span<const QuantizedWeight* const>, Tensor&,
                    float) override {
    return false;
  }
};

}  // namespace

bool QuantOps::fp8_gemm(const Tensor& x, const QuantizedWeight& w, bool trans_w, Tensor& y, float beta) {
  const QuantizedWeight* const ws[] = {&w};
  if (trans_w) {
    Tensor* const ys[] = {&y};
    return fp8_gemm_shared(x, ws, ys, beta);
  }
  const Tensor* const xs[] = {&x};
  return fp8_gemm_sum(xs, ws, y, beta);
}

QuantOps& quant_ops(Backend& be) {
  if (auto* q = dynamic_cast<QuantOps*>(&be)) return *q;
  static CpuQuantOps cpu;  // stateless
  check(be.device() == Device::CPU, [&] {
    return "backend " + be.name() +
           " has no quantized-weight ops (base_quantization needs "
           "the CPU or CUDA backend)";
  });
  return cpu;
}

}  // namespace deltatune
