#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace deltatune {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::view(Shape new_shape) const {
  Tensor t = *this;
  t.shape = std::move(new_shape);
  check(t.numel() == numel(), "internal: view " + shape_str(t.shape) + " of tensor " + shape_str(shape));
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  check(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape[0],
        "internal: slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + shape_str(shape));
  Tensor t = *this;
  const size_t row_bytes = shape[0] ? nbytes() / static_cast<size_t>(shape[0]) : 0;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes;
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::index(int64_t i) const {
  Tensor t = slice(i, i + 1);
  t.shape.erase(t.shape.begin());
  return t;
}

Tensor host_tensor(Shape shape, DType dtype) {
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.device = Device::CPU;
  const size_t n = std::max<size_t>(t.nbytes(), 1);
  void* p = std::calloc(n, 1);
  check(p != nullptr, "out of host memory allocating " + std::to_string(n) + " bytes");
  t.storage = std::shared_ptr<void>(p, std::free);
  t.data = p;
  return t;
}

static float load_float(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.ptr<float>()[i];
    case DType::BF16: return bf16_to_f32(t.ptr<uint16_t>()[i]);
    case DType::F16: return f16_to_f32(t.ptr<uint16_t>()[i]);
    case DType::I32: return static_cast<float>(t.ptr<int32_t>()[i]);
    case DType::I64: return static_cast<float>(t.ptr<int64_t>()[i]);
    case DType::U8: return static_cast<float>(t.ptr<uint8_t>()[i]);
  }
  return 0.f;
}

std::vector<float> host_to_f32(const Tensor& t) {
  check(t.device == Device::CPU, "internal: host_to_f32 on a device tensor");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = load_float(t, i);
  return out;
}

Tensor host_convert(const Tensor& t, DType dtype) {
  check(t.device == Device::CPU, "internal: host_convert on a device tensor");
  Tensor out = host_tensor(t.shape, dtype);
  if (t.dtype == dtype) {
    std::memcpy(out.data, t.data, t.nbytes());
    return out;
  }
  const int64_t n = t.numel();
  const bool int_src = t.dtype == DType::I32 || t.dtype == DType::I64 || t.dtype == DType::U8;
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::I32 || dtype == DType::I64) {
      int64_t v = t.dtype == DType::I32 ? t.ptr<int32_t>()[i]
                  : t.dtype == DType::I64 ? t.ptr<int64_t>()[i]
                                          : static_cast<int64_t>(load_float(t, i));
      if (dtype == DType::I32) out.ptr<int32_t>()[i] = static_cast<int32_t>(v);
      else out.ptr<int64_t>()[i] = v;
      continue;
    }
    const float f = int_src && t.dtype == DType::I64 ? static_cast<float>(t.ptr<int64_t>()[i]) : load_float(t, i);
    switch (dtype) {
      case DType::F32: out.ptr<float>()[i] = f; break;
      case DType::BF16: out.ptr<uint16_t>()[i] = f32_to_bf16(f); break;
      case DType::F16: out.ptr<uint16_t>()[i] = f32_to_f16(f); break;
      case DType::U8: out.ptr<uint8_t>()[i] = static_cast<uint8_t>(f); break;
      default: break;
    }
  }
  return out;
}

}  // namespace deltatune
