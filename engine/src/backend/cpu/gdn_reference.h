// Naive gated delta rule (spec §4.1), token by token: the parity oracle for the chunked CPU path and the
// CUDA kernels. Same contract as Backend::gdn_fwd (q, k L2-normalised inside with eps 1e-6, `scale` on
// q̂, value head j reads key head j / (HV/HK), state reset to 0 at each sequence of cu_seqlens), on host
// F32 tensors. fp64 = true keeps the state and all sums in double (a tighter oracle); false is plain fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace deltatune {

void gdn_recurrent_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const std::vector<int32_t>& cu_seqlens, float scale, Tensor& o, bool fp64 = false);

}  // namespace deltatune
