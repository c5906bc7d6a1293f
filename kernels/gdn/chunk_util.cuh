// Device helpers shared by the chunked GDN kernels (chunk_bwd.cu, chunk_bwd_mma.cu, chunk_dscan_mma.cu,
// chunk_grad_wgmma.cu).
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

// The sum of x over the warp's later lanes (lane + 1 .. 31), by a butterfly: at step o, `tot` is the sum over
// this lane's aligned block of o lanes; a lane in the lower half of a 2o-block adds the upper half's total.
__device__ __forceinline__ float later_lanes_sum(float x) {
  const int lane = threadIdx.x & 31;
  float tot = x, after = 0.f;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float p = __shfl_xor_sync(0xffffffffu, tot, o);
    if (!(lane & o)) after += p;
    tot += p;
  }
  return after;
}

// dg[(t0 + i)·HV + h] (=) Σ_{m ≥ i} dG[m] for i < len: the gate gradient from the per-row terms (one thread).
__device__ __forceinline__ void store_reverse_cumsum(const float* dG, float* dg, const ChunkRef& cr,
                                                     int64_t HV, int64_t h) {
  float acc = 0.f;
  for (int i = cr.len - 1; i >= 0; --i) {
    acc += dG[i];
    dg[(cr.t0 + i) * HV + h] = acc;
  }
}

// One work item of the state/intra kernels (chunk_bwd_mma.cu, chunk_grad_wgmma.cu): (chunk, value head),
// value heads fastest (the value heads of a key head share its q, k).
struct GradItem {
  int h;
  ChunkRef cr;
  int64_t hs, rv, rkq;  // (chunk, head) row of states/dh/gsum; first elements of the chunk's rows
};
template <int DK, int DV>
__device__ __forceinline__ GradItem grad_item(int item, const int32_t* chunks, int64_t HK, int64_t HV) {
  GradItem it;
  const int ch = item / static_cast<int>(HV);
  it.h = item % static_cast<int>(HV);
  it.cr = chunk_at(chunks, ch);
  it.hs = static_cast<int64_t>(ch) * HV + it.h;
  it.rv = (it.cr.t0 * HV + it.h) * DV, it.rkq = (it.cr.t0 * HK + it.h / (HV / HK)) * DK;
  return it;
}

// Whether chunk ch + 1 belongs to the sequence of chunk ch (chunk_off: each sequence's first chunk, nseq +
// 1).
__device__ __forceinline__ bool next_chunk_continues(const int32_t* chunk_off, int nseq, int ch) {
  int lo = 0, hi = nseq;  // the sequence of chunk ch: chunk_off[lo] <= ch < chunk_off[lo + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (chunk_off[mid] <= ch)
      lo = mid;
    else
      hi = mid;
  }
  return ch + 1 < chunk_off[lo + 1];
}

}  // namespace deltatune::kernels::gdn_chunk
