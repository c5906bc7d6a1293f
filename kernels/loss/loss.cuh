// Launchers for cross-entropy (cross_entropy.cu) and the pieces of the chunked linear cross-entropy
// (linear_ce.cu). Labels are I32 with -100 = ignored; a label outside [0, V) gives a NaN loss.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

constexpr int32_t kIgnoreIndex = -100;

// logits (T, V); labels I32 (T); loss_acc (+=) Σ CE over non-ignored rows (device double).
// dlogits (T, V) (=) grad_scale·(softmax − onehot), 0 on ignored rows; may alias logits; p null = none.
cudaError_t launch_cross_entropy(KIn logits, int64_t T, int64_t V, const int32_t* labels, float grad_scale,
                                 KOut dlogits, double* loss_acc, cudaStream_t s);

// Online log-sum-exp over column chunks. logits F32 (n, Vc) hold columns [v0, v0+Vc) of rows whose labels
// are labels (n). m, l F32 (n) running max / sum (start at -inf / 0); xlab F32 (n) (=) the label's logit
// when it falls in this chunk.
cudaError_t launch_lse_update(const float* logits, int64_t n, int64_t Vc, int64_t v0, const int32_t* labels, float* m,
                              float* l, float* xlab, cudaStream_t s);
// lse F32 (n) (=) m + log l; loss_acc (+=) Σ (lse − xlab) over non-ignored rows (V: label range check).
cudaError_t launch_lse_finish(int64_t n, int64_t V, const int32_t* labels, const float* m, const float* l,
                              const float* xlab, float* lse, double* loss_acc, cudaStream_t s);
// dl (n, Vc) (=) grad_scale·(exp(logits − lse) − onehot(label − v0)), 0 on ignored rows.
cudaError_t launch_ce_grad_chunk(const float* logits, int64_t n, int64_t Vc, int64_t v0, const int32_t* labels,
                                 const float* lse, float grad_scale, KOut dl, cudaStream_t s);

}  // namespace deltatune::kernels
