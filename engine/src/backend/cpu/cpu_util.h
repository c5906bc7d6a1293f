// Argument checks and small math helpers shared by the CPU op files (internal to backend/cpu).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace deltatune::cpu {

// F32 data of a CPU tensor; `what` names the op argument in the error message.
inline float* f32(const Tensor& t, const char* what) {
  check(t.device == Device::CPU, std::string("cpu backend: ") + what + " is not a CPU tensor");
  check(t.dtype == DType::F32, std::string("cpu backend: ") + what + " must be F32, got " + dtype_name(t.dtype) +
                                   " " + shape_str(t.shape));
  return t.ptr<float>();
}

inline int32_t* i32(const Tensor& t, const char* what) {
  check(t.device == Device::CPU, std::string("cpu backend: ") + what + " is not a CPU tensor");
  check(t.dtype == DType::I32, std::string("cpu backend: ") + what + " must be I32, got " + dtype_name(t.dtype) +
                                   " " + shape_str(t.shape));
  return t.ptr<int32_t>();
}

inline void check_numel(const Tensor& t, int64_t n, const char* what) {
  check(t.numel() == n, std::string("cpu backend: ") + what + " has shape " + shape_str(t.shape) + ", expected " +
                            std::to_string(n) + " elements");
}

inline void check_same(const Tensor& a, const Tensor& b, const char* what) {
  check(a.numel() == b.numel(), std::string("cpu backend: ") + what + ": shapes " + shape_str(a.shape) + " and " +
                                    shape_str(b.shape) + " differ");
}

// Validates `seq` against T tokens and returns the host cu_seqlens.
inline const std::vector<int32_t>& seq_bounds(const SeqLayout& seq, int64_t T, const char* op) {
  const auto& cu = seq.host_cu_seqlens;
  check(cu.size() >= 2 && cu.front() == 0 && cu.back() == T,
        std::string("cpu backend: ") + op + ": cu_seqlens must run from 0 to T=" + std::to_string(T));
  for (size_t i = 1; i < cu.size(); ++i)
    check(cu[i] >= cu[i - 1], std::string("cpu backend: ") + op + ": cu_seqlens not increasing");
  return cu;
}

// lo[t], hi[t]: first and one-past-last token of the sequence holding token t.
inline void seq_token_ranges(const std::vector<int32_t>& cu, std::vector<int32_t>& lo, std::vector<int32_t>& hi) {
  lo.resize(static_cast<size_t>(cu.back()));
  hi.resize(static_cast<size_t>(cu.back()));
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int32_t t = cu[n]; t < cu[n + 1]; ++t) {
      lo[t] = cu[n];
      hi[t] = cu[n + 1];
    }
}

inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float siluf(float x) { return x * sigmoidf(x); }
// d/dx silu(x) = σ(x)(1 + x(1 − σ(x))).
inline float silu_grad(float x) {
  const float s = sigmoidf(x);
  return s * (1.f + x * (1.f - s));
}
// torch.nn.functional.softplus with beta=1, threshold=20 (linear above the threshold).
inline float softplusf(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace deltatune::cpu
