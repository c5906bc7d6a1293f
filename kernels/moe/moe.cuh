// Launchers for the MoE router (router.cu) and row gather/scatter helpers (rows.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// logits (T, E); idx I32 (T, k) (=); w F32 (T, k) (=).
cudaError_t launch_moe_router_fwd(KIn logits, int64_t T, int E, int k, int32_t* idx, float* w, cudaStream_t s);
// dw, w F32 (T, k); idx I32 (T, k); dlogits (T, E) (=).
cudaError_t launch_moe_router_bwd(const float* dw, const int32_t* idx, const float* w, int64_t T, int E, int k,
                                  KOut dlogits, cudaStream_t s);
// dst[i] (=) src[rows[i]] for i < n; src (src_rows, H); rows outside [0, src_rows) give a zero row.
cudaError_t launch_gather_rows(KIn src, int64_t src_rows, const int32_t* rows, int64_t n, int64_t H, KOut dst,
                               cudaStream_t s);
// dst[rows[i]] (+=) scale[i]·src[i]; src (n, H); scale F32 (n) or null (= 1); atomics (rows may repeat).
cudaError_t launch_scatter_add_rows(KIn src, const int32_t* rows, const float* scale, int64_t n, int64_t H,
                                    KOut dst, int64_t dst_rows, cudaStream_t s);
// out[i] (=) Σ_c a[i,c]·b[i,c]; a, b (n, H); out F32 (n).
cudaError_t launch_row_dot(KIn a, KIn b, int64_t n, int64_t H, float* out, cudaStream_t s);
// y[i, :] (=) x[i, :]·sc[i]; sc F32 (n).
cudaError_t launch_scale_rows(KIn x, const float* sc, int64_t n, int64_t H, KOut y, cudaStream_t s);

}  // namespace deltatune::kernels
