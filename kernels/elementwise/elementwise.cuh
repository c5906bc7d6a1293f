// Launchers for elementwise ops, conversions and whole-tensor reductions (elementwise.cu).
// All return the launch status (cudaGetLastError). Element counts are n; pointers are flat views.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "common/kptr.h"

namespace deltatune::kernels {

cudaError_t launch_fill(KOut y, int64_t n, float value, cudaStream_t s);                // y (=) value
cudaError_t launch_convert(KOut y, KIn x, int64_t n, cudaStream_t s);                  // y (=) x
// y[r, y_col + c] (=) x[r, x_col + c]; x (rows, x_cols), y (rows, y_cols), c < ncols.
cudaError_t launch_copy_cols(KOut y, int64_t y_cols, int64_t y_col, KIn x, int64_t x_cols, int64_t x_col,
                             int64_t rows, int64_t ncols, cudaStream_t s);
cudaError_t launch_add(KOut y, KIn x, float alpha, int64_t n, cudaStream_t s);        // y (+=) alpha·x
cudaError_t launch_scale(KOut y, float alpha, int64_t n, cudaStream_t s);             // y (=) alpha·y
cudaError_t launch_dropout(KIn x, float p, uint64_t seed, KOut y, int64_t n, cudaStream_t s);
cudaError_t launch_sigmoid(KIn x, KOut y, int64_t n, cudaStream_t s);
cudaError_t launch_swiglu_fwd(KIn gate, KIn up, KOut out, int64_t n, cudaStream_t s);
cudaError_t launch_swiglu_bwd(KIn dout, KIn gate, KIn up, KOut dgate, KOut dup, int64_t n, cudaStream_t s);
cudaError_t launch_sigmoid_mul_fwd(KIn x, KIn gate, KOut out, int64_t n, cudaStream_t s);
cudaError_t launch_sigmoid_mul_bwd(KIn dout, KIn x, KIn gate, KOut dx, KOut dgate, int64_t n, cudaStream_t s);
// The same with gate (and dgate) as `rows` rows of `cols` values ld_g apart (a column block of wider rows:
// the attention output gate, read and its gradient written in q_proj's [q | gate] rows); x, out, dout, dx
// contiguous (rows·cols). bf16 only, cols and ld_g multiples of 8, 16-byte aligned pointers:
// sigmoid_mul_cols_fits says whether the operands qualify (else the launchers refuse with
// cudaErrorInvalidValue).
bool sigmoid_mul_cols_fits(std::initializer_list<KIn> ts, int64_t cols, int64_t ld_g);
cudaError_t launch_sigmoid_mul_fwd_cols(KIn x, KIn gate, int64_t ld_g, KOut out, int64_t rows, int64_t cols,
                                        cudaStream_t s);
cudaError_t launch_sigmoid_mul_bwd_cols(KIn dout, KIn x, KIn gate, int64_t ld_g, KOut dx, KOut dgate,
                                        int64_t rows, int64_t cols, cudaStream_t s);
// Σ x² accumulated in fp64 into *acc (device double, (+=)).
cudaError_t launch_sum_squares(KIn x, int64_t n, double* acc, cudaStream_t s);
// *flag (=) 1 if any element is NaN/Inf (flag must be zeroed by the caller; only ever set to 1).
cudaError_t launch_any_nonfinite(KIn x, int64_t n, int32_t* flag, cudaStream_t s);
// The same over `count` tensors (xs[i] of ns[i] elements) in one launch per 96 tensors (reduce_many.cu).
cudaError_t launch_sum_squares_many(const KIn* xs, const int64_t* ns, int count, double* acc, cudaStream_t s);
cudaError_t launch_any_nonfinite_many(const KIn* xs, const int64_t* ns, int count, int32_t* flag, cudaStream_t s);
// dst[i] (=) src[i] (ns[i] elements) converted to dst[i]'s type, for `count` tensors in a few launches
// (convert_many.cu).
cudaError_t launch_convert_many(const KOut* dst, const KIn* src, const int64_t* ns, int count, cudaStream_t s);

}  // namespace deltatune::kernels
