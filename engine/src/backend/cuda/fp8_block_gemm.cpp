#include "backend/cuda/fp8_block_gemm.h"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace deltatune::cuda {

namespace {
void lt_check(cublasStatus_t s, const char* what) {
  cublas_check(s, what);
}

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v, const char* what) {
  lt_check(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)), what);
}
}  // namespace

Fp8BlockGemm::Fp8BlockGemm(void* workspace, size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
}

Fp8BlockGemm::~Fp8BlockGemm() {
  for (auto& [key, p] : plans_) {
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.x) cublasLtMatrixLayoutDestroy(p.x);
    if (p.w) cublasLtMatrixLayoutDestroy(p.w);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  }
  if (lt_) cublasLtDestroy(lt_);
}

// cuBLASLt is column-major: W [m, k] row-major is the k x m matrix A taken transposed, X [n, k] row-major the
// k x n matrix B, and D [n, m] row-major the m x n column-major result (FP8 on sm_90 needs this "TN" form).
Fp8BlockGemm::Plan& Fp8BlockGemm::plan(int64_t m, int64_t n, int64_t k, bool accumulate) {
  const auto key = std::make_tuple(m, n, k, accumulate);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  lt_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "fp8 gemm: transa");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "fp8 gemm: transb");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F),
           "fp8 gemm: A scale mode");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F),
           "fp8 gemm: B scale mode");
  lt_check(cublasLtMatrixLayoutCreate(&p.w, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k),
           "fp8 gemm: A layout");
  lt_check(cublasLtMatrixLayoutCreate(&p.x, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k),
           "fp8 gemm: B layout");
  lt_check(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, uint64_t(m), uint64_t(n), m), "fp8 gemm: D layout");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_bytes_, sizeof(workspace_bytes_)),
           "fp8 gemm: workspace preference");
  // The scale pointers must be set for the heuristic to see the scaling modes in use; any non-null value
  // does.
  const void* dummy = workspace_;
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, dummy, "fp8 gemm: A scale");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, dummy, "fp8 gemm: B scale");
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.w, p.x, p.d, p.d, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  p.status = st, p.returned = returned;
  p.found = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  if (p.found) p.algo = result.algo;
  (void)accumulate;  // part of the key: the heuristic may choose differently when C is read
  return p;
}

bool Fp8BlockGemm::supports(int64_t m, int64_t n, int64_t k, bool accumulate) {
  return plan(m, n, k, accumulate).found;
}

std::string Fp8BlockGemm::refusal(int64_t m, int64_t n, int64_t k, bool accumulate) {
  const Plan& p = plan(m, n, k, accumulate);
  if (p.found) return "";
  return std::string("cublasLtMatmulAlgoGetHeuristic: ") + cublasGetStatusName(p.status) + ", " +
         std::to_string(p.returned) + " algorithms";
}

void Fp8BlockGemm::run(const Fp8BlockGemmArgs& a, cudaStream_t s) {
  Plan& p = plan(a.m, a.n, a.k, a.beta != 0.f);
  check(p.found, "internal: fp8 gemm " + std::to_string(a.n) + "x" + std::to_string(a.k) + " · " +
                     std::to_string(a.k) + "x" + std::to_string(a.m) + " has no cuBLASLt algorithm");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(a.w_scales),
           "fp8 gemm: A scale");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a.x_scales),
           "fp8 gemm: B scale");
  const float alpha = 1.f;
  lt_check(cublasLtMatmul(lt_, p.desc, &alpha, a.w, p.w, a.x, p.x, &a.beta, a.d, p.d, a.d, p.d, &p.algo,
                          workspace_, workspace_bytes_, s),
           "fp8 gemm (cublasLtMatmul, block-scaled)");
}

}  // namespace deltatune::cuda
