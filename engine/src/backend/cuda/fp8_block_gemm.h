// Block-scaled FP8 GEMMs through cuBLASLt (sm_90: CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for the weight,
// VEC128_32F for the activations, FP32 accumulation): one cuBLASLt handle and the chosen algorithm of each
// problem shape, kept for the backend's lifetime (a heuristic query costs tens of microseconds, a step makes
// hundreds of these products). The algorithm is the heuristic's first until tune() has timed its candidates on
// the real operands (once per shape). Internal to the CUDA backend (cuda_quant.cpp).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace deltatune::cuda {

// D [n, m] row-major (bf16) (=) X·Wᵀ + beta·D, where W [m, k] holds e4m3 bytes with 128x128 block scales
// w_scales [m/128][round_up(k/128, 4)] and X [n, k] e4m3 bytes with 1x128 scales x_scales [k/128][round_up(n,
// 4)] (the layouts cuBLASLt reads: kernels/quant/fp8_gemm_operands.cuh). m and k multiples of 128; all
// pointers 256-byte aligned.
struct Fp8BlockGemmArgs {
  const uint8_t* w = nullptr;
  const float* w_scales = nullptr;
  const uint8_t* x = nullptr;
  const float* x_scales = nullptr;
  void* d = nullptr;
  int64_t m = 0, n = 0, k = 0;
  float beta = 0.f;
};

class Fp8BlockGemm {
 public:
  Fp8BlockGemm(void* workspace, size_t workspace_bytes);
  ~Fp8BlockGemm();
  Fp8BlockGemm(const Fp8BlockGemm&) = delete;
  Fp8BlockGemm& operator=(const Fp8BlockGemm&) = delete;

  // Whether cuBLASLt has an algorithm for this shape (beta != 0: D is read too).
  bool supports(int64_t m, int64_t n, int64_t k, bool accumulate);
  // "" where supports() holds, else what cuBLASLt answered (the heuristic's status and algorithm count).
  std::string refusal(int64_t m, int64_t n, int64_t k, bool accumulate);
  // Enqueues the product on `s`; throws Error where supports() is false.
  void run(const Fp8BlockGemmArgs& a, cudaStream_t s);
  // Whether the shape of `a` still runs the heuristic's first algorithm untimed.
  bool needs_tuning(const Fp8BlockGemmArgs& a);
  // Times each candidate algorithm on `a` (a.d a scratch that may be overwritten; synchronises with `s`) and
  // keeps the fastest; nothing is timed while `s` is being captured into a graph.
  void tune(const Fp8BlockGemmArgs& a, cudaStream_t s);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first
    bool found = false, tuned = false;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // of the heuristic query
    int returned = 0;
  };
  Plan& plan(int64_t m, int64_t n, int64_t k, bool accumulate);
  cublasStatus_t matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const Fp8BlockGemmArgs& a, cudaStream_t s);

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Plan> plans_;
};

}  // namespace deltatune::cuda
