// CUDA / cuBLAS status -> deltatune::Error with the failing call named. Host-only.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

namespace deltatune::cuda {

// Throws Error("CUDA error in <what>: <name> (<text>)") unless e == cudaSuccess. Out-of-memory errors carry
// the advice of oom_advice().
void cuda_check(cudaError_t e, const char* what);
void cublas_check(cublasStatus_t s, const char* what);

// "lower sequence_len or micro_batch_size, or enable gradient_checkpointing / fused_loss"
std::string oom_advice();

}  // namespace deltatune::cuda
