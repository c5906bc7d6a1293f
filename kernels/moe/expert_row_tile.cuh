// The forward-form grouped expert GEMMs' block map (grouped_gemm.cu, grouped_gemm_wgmma.cu): the grid holds
// row tiles (bound: ceil(M / BM) + E, blocks past tile_off[E] exit) x column tiles, and tile_off[E+1] is the
// exclusive scan of ceil(rows_e / BM) built on the device.
#pragma once
#include <cstdint>

namespace deltatune::kernels {

struct ExpertRowTile {
  int e;        // the expert
  int64_t r0;   // its first row in this tile
  int ntile;    // the column tile
};

// This block's tile; false for blocks past the device-side tile count. Blocks in launch order (blockIdx.x
// fastest) take the column tiles of one row tile before the next row tile: the x rows of a tile are read from DRAM
// once while its column tiles run side by side (row tiles first re-read x once per column tile; 35B-A3B expert
// GEMMs 19.99 -> 19.54 ms a step, ncu, H200).
__device__ __forceinline__ bool expert_row_tile(const int32_t* tile_off, const int32_t* offsets, int E, int BM,
                                                ExpertRowTile& t) {
  const int64_t lin = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  const int tile = int(lin / gridDim.y);
  t.ntile = int(lin % gridDim.y);
  if (tile >= tile_off[E]) return false;
  int lo = 0, hi = E - 1;  // the expert e with tile_off[e] <= tile < tile_off[e+1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_off[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  t.e = lo;
  t.r0 = offsets[lo] + int64_t(tile - tile_off[lo]) * BM;
  return true;
}

}  // namespace deltatune::kernels
