// A Tensor is a typed view of contiguous row-major memory on one device; `storage` keeps that memory
// alive (an owned buffer, an mmap'ed file, or a block from a device allocator).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deltatune {

enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  Shape shape;
  std::shared_ptr<void> storage;

  bool defined() const { return data != nullptr || !shape.empty(); }
  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(i < 0 ? i + ndim() : i); }
  int64_t rows() const { return ndim() == 0 ? 1 : numel() / shape.back(); }  // all but the last dim
  int64_t cols() const { return ndim() == 0 ? 1 : shape.back(); }

  template <class T> T* ptr() const { return static_cast<T*>(data); }

  // Same memory, new shape (numel must match).
  Tensor view(Shape new_shape) const;
  // Rows [begin, end) of the first dimension (contiguous, shares storage).
  Tensor slice(int64_t begin, int64_t end) const;
  // Element index i of the first dimension with that dimension dropped: t[i].
  Tensor index(int64_t i) const;
};

// Host (CPU) tensors, zero-filled.
Tensor host_tensor(Shape shape, DType dtype = DType::F32);
// Host copy of a host tensor converted to `dtype` (F32/BF16/F16 <-> F32/BF16/F16; ints to ints).
Tensor host_convert(const Tensor& t, DType dtype);
// Host F32 vector of any float host tensor.
std::vector<float> host_to_f32(const Tensor& t);

}  // namespace deltatune
