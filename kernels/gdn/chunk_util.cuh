// Device helpers shared by the chunked GDN kernels (chunk_bwd.cu, chunk_bwd_mma.cu, chunk_dscan_mma.cu).
#pragma once
#include <cstdint>

namespace deltatune::kernels::gdn_chunk {

// One chunk of the chunk list (I32 (nchunks, 2): first token, length ≤ 64).
struct ChunkRef {
  int64_t t0;
  int len;
};
__device__ __forceinline__ ChunkRef chunk_at(const int32_t* chunks, int ch) {
  return ChunkRef{chunks[2 * ch], chunks[2 * ch + 1]};
}

// Sum over the 4 lanes of an mma thread group (lanes 4g .. 4g+3 hold one accumulator row).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

// dg[(t0 + i)·HV + h] (=) Σ_{m ≥ i} dG[m] for i < len: the gate gradient from the per-row terms (one thread).
__device__ __forceinline__ void store_reverse_cumsum(const float* dG, float* dg, const ChunkRef& cr, int64_t HV,
                                                     int64_t h) {
  float acc = 0.f;
  for (int i = cr.len - 1; i >= 0; --i) {
    acc += dG[i];
    dg[(cr.t0 + i) * HV + h] = acc;
  }
}

}  // namespace deltatune::kernels::gdn_chunk
