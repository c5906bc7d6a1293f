// Launcher for cross-entropy (cross_entropy.cu); the linear cross-entropy runs it on row chunks of logits.
// Labels are I32 with -100 = ignored; a label outside [0, V) gives a NaN loss.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kernel_policy.h"
#include "common/kptr.h"

namespace deltatune::kernels {

constexpr int32_t kIgnoreIndex = -100;

// logits (T, V); labels I32 (T); loss_acc (+=) Σ CE over non-ignored rows (device double).
// dlogits (T, V) (=) grad_scale·(softmax − onehot), 0 on ignored rows; may alias logits; p null = none.
// grad_scale_dev non-null: the scale is read from that device float when the kernel runs (a recorded step's
// 1/targets, rewritten before each replay) and grad_scale is unused. Under the Hopper policy wide F32 or bf16
// rows (the linear cross-entropy's chunks; bf16 with a bf16 gradient or none) are split over a thread-block
// cluster and read from memory once.
cudaError_t launch_cross_entropy(KIn logits, int64_t T, int64_t V, const int32_t* labels, float grad_scale,
                                 const float* grad_scale_dev, KOut dlogits, double* loss_acc,
                                 const KernelPolicy& policy, cudaStream_t s);

// Whether launch_cross_entropy_bf16_in_place runs for rows of V values under this policy (Hopper's cluster
// kernel: V % 4 == 0, V >= 32K, the row's slices fit shared memory).
bool cross_entropy_bf16_in_place(const KernelPolicy& policy, int64_t V);
// launch_cross_entropy with a bf16 gradient written over the F32 logits themselves (16-byte aligned): row r's
// gradient is the first V values of row r of the buffer viewed as bf16 [T, 2V] (a leading dimension of 2V).
// The linear cross-entropy's chunks then need no separate gradient buffer. cudaErrorInvalidValue where
// cross_entropy_bf16_in_place is false or logits is not 16-byte aligned.
cudaError_t launch_cross_entropy_bf16_in_place(float* logits, int64_t T, int64_t V, const int32_t* labels,
                                               float grad_scale, const float* grad_scale_dev, double* loss_acc,
                                               const KernelPolicy& policy, cudaStream_t s);


}  // namespace deltatune::kernels
