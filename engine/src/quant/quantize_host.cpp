#include "quant/quantize_host.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/codebooks.h"

namespace deltatune {

float fp8_e4m3_to_f32(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float a;
  if (exp == 15 && mant == 7) a = NAN;
  else if (exp == 0) a = std::ldexp(static_cast<float>(mant), -9);
  else a = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return sign ? -a : a;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;             // a = m' * 2^e, m' in [1, 2)
  if (a == 0.0 || e < -6) {  // subnormal: multiples of 2^-9 (q == 8 is the smallest normal, 0x08)
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return sign | static_cast<uint8_t>(q);
  }
  int mq = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1.0) * 8.0));
  if (mq == 8) {
    mq = 0;
    ++e;
  }
  const int code = ((e + 7) << 3) | mq;
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr float kFp8Max = 448.f;

QuantizedWeight quantize_fp8(const std::vector<float>& w, int64_t rows, int64_t cols) {
  QuantizedWeight q;
  q.format = QuantFormat::FP8;
  q.shape = {rows, cols};
  q.values = host_tensor({rows, cols}, DType::U8);
  const int64_t br = ceil_div(rows, kFp8Block), bc = ceil_div(cols, kFp8Block);
  q.scales = host_tensor({br, bc}, DType::F32);
  uint8_t* v = q.values.ptr<uint8_t>();
  float* s = q.scales.ptr<float>();
  for (int64_t bi = 0; bi < br; ++bi)
    for (int64_t bj = 0; bj < bc; ++bj) {
      const int64_t r0 = bi * kFp8Block, r1 = std::min(rows, r0 + kFp8Block);
      const int64_t c0 = bj * kFp8Block, c1 = std::min(cols, c0 + kFp8Block);
      float amax = 0.f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
      const float scale = amax > 0.f ? kFp8Max / amax : 1.f;
      s[bi * bc + bj] = 1.f / scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float x = std::clamp(w[static_cast<size_t>(r * cols + c)] * scale, -kFp8Max, kFp8Max);
          v[r * cols + c] = f32_to_fp8_e4m3(x);
        }
    }
  return q;
}

QuantizedWeight quantize_nf4(const std::vector<float>& w, Shape shape) {
  const int64_t n = static_cast<int64_t>(w.size());
  check(n % 2 == 0, "internal: NF4 needs an even number of values, got " + std::to_string(n));
  const int64_t nb = ceil_div(n, kNf4Block), nb2 = ceil_div(nb, kNf4Block2);
  const auto& code = nf4_codebook();
  const auto& code2 = dynamic_map_signed();
  QuantizedWeight q;
  q.format = QuantFormat::NF4;
  q.shape = std::move(shape);
  q.values = host_tensor({n / 2}, DType::U8);
  q.scales = host_tensor({nb}, DType::U8);
  q.absmax2 = host_tensor({nb2}, DType::F32);
  q.code2 = host_tensor({256}, DType::F32);
  std::copy(code2.begin(), code2.end(), q.code2.ptr<float>());
  std::vector<float> absmax(static_cast<size_t>(nb));
  uint8_t* packed = q.values.ptr<uint8_t>();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * kNf4Block, i1 = std::min(n, i0 + kNf4Block);
    float amax = 0.f;
    for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(w[static_cast<size_t>(i)]));
    absmax[static_cast<size_t>(b)] = amax;
    const float inv = amax > 0.f ? 1.f / amax : 0.f;
    for (int64_t i = i0; i < i1; ++i) {
      const int idx = nearest_index(code.data(), 16, w[static_cast<size_t>(i)] * inv);
      uint8_t& byte = packed[i / 2];
      byte = (i % 2 == 0) ? static_cast<uint8_t>((byte & 0x0f) | (idx << 4)) : static_cast<uint8_t>((byte & 0xf0) | idx);
    }
  }
  // Double quantization: the mean is taken out, then 8-bit dynamic-map blocks of 256 absmax values.
  double sum = 0;
  for (float a : absmax) sum += a;
  q.offset = static_cast<float>(sum / static_cast<double>(nb));
  float* a2 = q.absmax2.ptr<float>();
  uint8_t* qa = q.scales.ptr<uint8_t>();
  for (int64_t b2 = 0; b2 < nb2; ++b2) {
    const int64_t j0 = b2 * kNf4Block2, j1 = std::min(nb, j0 + kNf4Block2);
    float amax = 0.f;
    for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(absmax[static_cast<size_t>(j)] - q.offset));
    a2[b2] = amax;
    const float inv = amax > 0.f ? 1.f / amax : 0.f;
    for (int64_t j = j0; j < j1; ++j)
      qa[j] = static_cast<uint8_t>(nearest_index(code2.data(), 256, (absmax[static_cast<size_t>(j)] - q.offset) * inv));
  }
  return q;
}

}  // namespace

QuantizedWeight quantize_host(const Tensor& w, QuantFormat format) {
  check(w.device == Device::CPU && w.ndim() == 2, "internal: quantize_host needs a host matrix, got " + shape_str(w.shape));
  const std::vector<float> f = host_to_f32(w);
  switch (format) {
    case QuantFormat::FP8: return quantize_fp8(f, w.dim(0), w.dim(1));
    case QuantFormat::NF4: return quantize_nf4(f, w.shape);
    case QuantFormat::None: break;
  }
  throw Error("internal: quantize_host with format none");
}

QuantizedWeight fp8_weight_host(const Tensor& values, const Tensor& scale_inv) {
  check(values.dtype == DType::U8 && values.ndim() == 2,
        "internal: fp8 values must be e4m3 bytes [rows, cols], got " + shape_str(values.shape));
  QuantizedWeight q;
  q.format = QuantFormat::FP8;
  q.shape = values.shape;
  q.values = values;
  q.scales = host_convert(scale_inv, DType::F32);
  return q;
}

void dequantize_host(const QuantizedWeight& q, float* out) {
  const int64_t rows = q.rows(), cols = q.cols(), n = rows * cols;
  if (q.format == QuantFormat::FP8) {
    const uint8_t* v = q.values.ptr<uint8_t>();
    const float* s = q.scales.ptr<float>();
    const int64_t bc = q.scales.dim(1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = fp8_e4m3_to_f32(v[r * cols + c]) * s[(r / kFp8Block) * bc + c / kFp8Block];
    return;
  }
  check(q.format == QuantFormat::NF4, "internal: dequantize_host of an unquantized weight");
  const auto& code = nf4_codebook();
  const uint8_t* packed = q.values.ptr<uint8_t>();
  const uint8_t* qa = q.scales.ptr<uint8_t>();
  const float* a2 = q.absmax2.ptr<float>();
  const float* code2 = q.code2.ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / kNf4Block;
    const float absmax = code2[qa[b]] * a2[b / kNf4Block2] + q.offset;
    const int idx = (i % 2 == 0) ? (packed[i / 2] >> 4) : (packed[i / 2] & 0x0f);
    out[i] = code[static_cast<size_t>(idx)] * absmax;
  }
}

Tensor dequantize_host(const QuantizedWeight& q) {
  check(q.values.device == Device::CPU, "internal: dequantize_host of a device weight");
  Tensor out = host_tensor(q.shape, DType::F32);
  dequantize_host(q, out.ptr<float>());
  return out;
}

}  // namespace deltatune
