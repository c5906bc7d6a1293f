#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace deltatune::cuda {

std::string oom_advice() {
  return "the GPU ran out of memory: lower `sequence_len` or `micro_batch_size`, or set "
         "`gradient_checkpointing: true` and `fused_loss: true` in the run config";
}

void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the process can go on
  std::string msg = std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                    ")";
  if (e == cudaErrorMemoryAllocation) msg += "; " + oom_advice();
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    msg += "; check that an NVIDIA GPU and a driver supporting CUDA " + std::to_string(CUDART_VERSION / 1000) +
           " are present (nvidia-smi)";
  throw Error(msg);
}

void cublas_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::string msg = std::string("cuBLAS error in ") + what + ": " + cublasGetStatusName(s) + " (" +
                    cublasGetStatusString(s) + ")";
  if (s == CUBLAS_STATUS_ALLOC_FAILED) msg += "; " + oom_advice();
  throw Error(msg);
}

}  // namespace deltatune::cuda
