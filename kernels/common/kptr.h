// Typed raw pointers passed from the host backend to kernel launchers. Host-includable (no CUDA syntax).
// Elementwise and reduction kernels read and write any float storage type through these, converting to
// fp32 in registers, so the model code may mix BF16 activations with F32 statistics or LoRA tensors.
#pragma once
#include <cstdint>

namespace deltatune::kernels {

enum class KType : int32_t { F32 = 0, BF16 = 1, F16 = 2 };

// Read-only tensor data.
struct KIn {
  const void* p = nullptr;
  KType t = KType::F32;
};

// Written tensor data.
struct KOut {
  void* p = nullptr;
  KType t = KType::F32;
};

}  // namespace deltatune::kernels
