// The off-diagonal blocks of the forward prep's solve T = (I + A)^{-1} (prep_solve.cuh) with the sums over m
// split across the distance phases: a block's partial sum Σ_m A_rm·T_mk (formed transposed, as
// off_diagonal_t) is started by a warp that is idle in an earlier phase, handed over in shared memory (fp32,
// exact) and continued by the next warp, so each phase adds one m term and no phase waits for a three-term
// chain. The same mma.sync operations on the same values in the same order as off_diagonal_t: T is
// bit-identical. Device only (fwd_prep_wgmma.cu).
#pragma once
#include <cstdint>

#include "gdn/prep_solve.cuh"

namespace deltatune::kernels::gdn_prep {

// A warp's partial sum in shared memory (8 floats a lane, lane-major: conflict-free).
__device__ __forceinline__ void part_store(float* part, const float (&p)[2][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < 8; ++q) part[32 * q + lane] = p[q >> 2][q & 3];
}
__device__ __forceinline__ void part_load(const float* part, float (&p)[2][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < 8; ++q) p[q >> 2][q & 3] = part[32 * q + lane];
}

// The three distance phases of a 64-row chunk (4 blocks of 16) for the consumer warps 0 .. 7, each phase
// followed by `sync` (the consumers' barrier); the diagonal blocks are in Tf. `part`: 3 x 256 floats.
//   d = 1: warps 0..2 (1,0), (2,1), (3,2); warp 3 starts (2,0) with m = 0, warp 4 (3,1) with m = 1, warp 5
//          (3,0) with m = 0
//   d = 2: warp 0 (2,0) adds m = 1 and finishes, warp 1 (3,1) adds m = 2 and finishes, warp 2 (3,0) adds m = 1
//   d = 3: warp 0 (3,0) adds m = 2 and finishes
template <class Sync>
__device__ __forceinline__ void off_diagonal_phases(const float* Af, float* Tf, float* part, int warp, int len,
                                                    Sync sync) {
  float p[2][4] = {};
  if (warp < 3) {
    off_diagonal_part(Af, Tf, warp, warp + 1, warp, warp + 1, p);
    off_diagonal_finish(Tf, warp, warp + 1, len, p);
  } else if (warp < 6) {
    const int k = warp == 4 ? 1 : 0, r = warp == 3 ? 2 : 3;
    off_diagonal_part(Af, Tf, k, r, k, k + 1, p);
    part_store(part + 256 * (warp - 3), p);
  }
  sync();
  if (warp < 3) {
    const int k = warp == 1 ? 1 : 0, r = warp == 0 ? 2 : 3, m = warp == 1 ? 2 : 1;
    part_load(part + 256 * warp, p);
    off_diagonal_part(Af, Tf, k, r, m, m + 1, p);
    if (warp < 2)
      off_diagonal_finish(Tf, k, r, len, p);
    else
      part_store(part + 512, p);
  }
  sync();
  if (warp == 0) {
    part_load(part + 512, p);
    off_diagonal_part(Af, Tf, 0, 3, 2, 3, p);
    off_diagonal_finish(Tf, 0, 3, len, p);
  }
  sync();
}

}  // namespace deltatune::kernels::gdn_prep
