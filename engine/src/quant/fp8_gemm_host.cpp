#include "quant/fp8_gemm_host.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/quantize_host.h"

namespace deltatune {

Tensor fp8_gemm_host(const Tensor& x, const QuantizedWeight& w, bool trans_w) {
  check(w.format == QuantFormat::FP8 && x.ndim() == 2,
        "internal: fp8_gemm_host needs an FP8 weight and a matrix");
  const int64_t n = x.rows(), k = x.cols(), m = trans_w ? w.rows() : w.cols();
  check(k % 128 == 0 && k == (trans_w ? w.cols() : w.rows()),
        "internal: fp8_gemm_host x " + shape_str(x.shape) + " with W " + shape_str(w.shape));
  const std::vector<float> xf = host_to_f32(x);
  std::vector<float> xq(xf.size());
  constexpr float kMax = 448.f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k; g += 128) {
      const float* src = &xf[r * k + g];
      float amax = 0.f;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(src[i]));
      const float scale = amax > 0.f ? kMax / amax : 1.f, inv = 1.f / scale;
      for (int i = 0; i < 128; ++i)
        xq[r * k + g + i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::clamp(src[i] * scale, -kMax, kMax))) * inv;
    }
  const Tensor wd = dequantize_host(w);
  const float* W = wd.ptr<float>();
  Tensor y = host_tensor({n, m}, DType::F32);
  float* Y = y.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(xq[r * k + i]) * (trans_w ? W[j * k + i] : W[i * m + j]);
      Y[r * m + j] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace deltatune
