// Launcher for the s·B tails of K-concatenated base weights (lora_tails.cu; model/lora_linear.cpp forms
// y = [x | u]·[W | s·B]ᵀ in one GEMM).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// For each of the n modules: dst[i·ld + c] (=) alpha·src[i·r + c] for i < rows, c < r (src contiguous
// [rows, r], any float type; dst bf16, rows ld apart).
constexpr int kLoraTailsMax = 4;
struct LoraTailsArgs {
  struct One {
    KIn src;
    void* dst = nullptr;
    int64_t rows = 0, ld = 0;
    float alpha = 1.f;
  } m[kLoraTailsMax];
  int n = 0, r = 0;
};
cudaError_t launch_lora_tails(const LoraTailsArgs& a, cudaStream_t s);

}  // namespace deltatune::kernels
