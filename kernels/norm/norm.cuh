// Launchers for RMSNorm (plain / zero-centred) and the GDN gated RMSNorm (rmsnorm.cu, gated_rmsnorm.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// x, y (rows, n); w (n); rstd F32 (rows).
cudaError_t launch_rmsnorm_fwd(KIn x, KIn w, float eps, bool zero_centred, KOut y, float* rstd, int64_t rows,
                               int64_t n, cudaStream_t s);
// The same with x and y rows ldx and ldy values apart (>= n): a column block of wider rows.
cudaError_t launch_rmsnorm_fwd_ld(KIn x, int64_t ldx, KIn w, float eps, bool zero_centred, KOut y,
                                  int64_t ldy, float* rstd, int64_t rows, int64_t n, cudaStream_t s);
// dy, x, dx (rows, n); w (n); rstd F32 (rows).
cudaError_t launch_rmsnorm_bwd(KIn dy, KIn x, KIn w, const float* rstd, bool zero_centred, KOut dx, int64_t rows,
                               int64_t n, cudaStream_t s);
// The same with x and dx rows ldx and ldd values apart (>= n; dy contiguous).
cudaError_t launch_rmsnorm_bwd_ld(KIn dy, KIn x, int64_t ldx, KIn w, const float* rstd, bool zero_centred,
                                  KOut dx, int64_t ldd, int64_t rows, int64_t n, cudaStream_t s);
// rmsnorm_bwd, then dx += residual (the residual stream's gradient) with the same two roundings, in one pass; bf16
// rows only: rmsnorm_bwd_add_fits says whether it takes these operands (else the caller runs the two ops).
bool rmsnorm_bwd_add_fits(KIn dy, KIn x, KIn residual, KOut dx, int64_t n);
cudaError_t launch_rmsnorm_bwd_add(KIn dy, KIn x, KIn w, const float* rstd, bool zero_centred, KIn residual, KOut dx,
                                   int64_t rows, int64_t n, cudaStream_t s);
// x, z, y (rows, n); w (n); rstd F32 (rows).
cudaError_t launch_gated_rmsnorm_fwd(KIn x, KIn z, KIn w, float eps, KOut y, float* rstd, int64_t rows,
                                     int64_t n, cudaStream_t s);
cudaError_t launch_gated_rmsnorm_bwd(KIn dy, KIn x, KIn z, KIn w, const float* rstd, KOut dx, KOut dz,
                                     int64_t rows, int64_t n, cudaStream_t s);

}  // namespace deltatune::kernels
