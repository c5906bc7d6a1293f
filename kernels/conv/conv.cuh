// Launchers for the depthwise causal conv1d + SiLU with sequence resets (conv1d_silu.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kptr.h"

namespace deltatune::kernels {

// One (T, C) tensor held as up to kMaxColParts contiguous column blocks side by side: part i is its own
// (T, end[i] − begin_i) tensor of columns [begin_i, end[i]), begin_0 = 0, begin_i = end[i − 1], end[n − 1] =
// C. The GDN layer's conv writes q | k | v (and reads their gradients) this way, with no copies.
constexpr int kMaxColParts = 4;
template <class P>
struct ColParts {
  P part[kMaxColParts]{};
  int64_t end[kMaxColParts]{};
  int n = 0;
};
template <class P>
ColParts<P> one_part(P p, int64_t C) {
  ColParts<P> r;
  r.part[0] = p, r.end[0] = C, r.n = 1;
  return r;
}

// x, y (T, C); w (C, K); cu_seqlens I32 (nseq+1).
cudaError_t launch_conv1d_silu_fwd(KIn x, KIn w, const int32_t* cu_seqlens, int nseq, const ColParts<KOut>& y,
                                   int64_t T, int64_t C, int K, cudaStream_t s);
// dy, x, dx (T, C); w (C, K).
cudaError_t launch_conv1d_silu_bwd(const ColParts<KIn>& dy, KIn x, KIn w, const int32_t* cu_seqlens, int nseq,
                                   KOut dx, int64_t T, int64_t C, int K, cudaStream_t s);

}  // namespace deltatune::kernels
