#include "backend/cuda/fp8_block_gemm.h"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"

namespace deltatune::cuda {

namespace {
constexpr int kCandidates = 8;
constexpr int kTimedRuns = 5;

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
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.w, p.x, p.d, p.d, pref, kCandidates, results, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  p.status = st, p.returned = returned;
  p.found = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  if (p.found) {
    p.algo = results[0].algo;
    for (int i = 0; i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
  }
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

cublasStatus_t Fp8BlockGemm::matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const Fp8BlockGemmArgs& a,
                                    cudaStream_t s) {
  const float alpha = 1.f;
  return cublasLtMatmul(lt_, p.desc, &alpha, a.w, p.w, a.x, p.x, &a.beta, a.d, p.d, a.d, p.d, &algo, workspace_,
                        workspace_bytes_, s);
}

void Fp8BlockGemm::run(const Fp8BlockGemmArgs& a, cudaStream_t s) {
  Plan& p = plan(a.m, a.n, a.k, a.beta != 0.f);
  check(p.found, [&] {
    return "internal: fp8 gemm " + std::to_string(a.n) + "x" + std::to_string(a.k) + " · " +
           std::to_string(a.k) + "x" + std::to_string(a.m) + " has no cuBLASLt algorithm";
  });
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(a.w_scales),
           "fp8 gemm: A scale");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a.x_scales),
           "fp8 gemm: B scale");
  lt_check(matmul(p, p.algo, a, s), "fp8 gemm (cublasLtMatmul, block-scaled)");
}

bool Fp8BlockGemm::needs_tuning(const Fp8BlockGemmArgs& a) {
  const Plan& p = plan(a.m, a.n, a.k, a.beta != 0.f);
  return p.found && !p.tuned;
}

void Fp8BlockGemm::tune(const Fp8BlockGemmArgs& a, cudaStream_t s) {
  Plan& p = plan(a.m, a.n, a.k, a.beta != 0.f);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(s, &capturing), "fp8 gemm tuning: cudaStreamIsCapturing");
  if (!p.found || p.tuned || capturing != cudaStreamCaptureStatusNone) return;
  p.tuned = true;
  if (p.candidates.size() < 2) return;
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(a.w_scales),
           "fp8 gemm: A scale");
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a.x_scales),
           "fp8 gemm: B scale");
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda_check(cudaEventCreate(&start), "fp8 gemm tuning: cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "fp8 gemm tuning: cudaEventCreate");
  float best = 0.f;
  for (const cublasLtMatmulAlgo_t& algo : p.candidates) {
    // A candidate the heuristic listed may still refuse these operands: it is skipped.
    if (matmul(p, algo, a, s) != CUBLAS_STATUS_SUCCESS) continue;
    cuda_check(cudaEventRecord(start, s), "fp8 gemm tuning: cudaEventRecord");
    bool ok = true;
    for (int i = 0; i < kTimedRuns && ok; ++i)
      ok = matmul(p, algo, a, s) == CUBLAS_STATUS_SUCCESS;
    cuda_check(cudaEventRecord(stop, s), "fp8 gemm tuning: cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "fp8 gemm tuning: cudaEventSynchronize");
    float ms = 0.f;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "fp8 gemm tuning: cudaEventElapsedTime");
    if (ok && (best == 0.f || ms < best)) best = ms, p.algo = algo;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace deltatune::cuda
