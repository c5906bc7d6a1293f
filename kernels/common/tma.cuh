// Hopper tensor memory accelerator (TMA, sm_90a): tiles of bf16 rows copied from global to shared memory by
// one thread through a tensor map, completing on a shared-memory mbarrier (multicast: into every block of a
// cluster, on each block's barrier); and the host side that encodes the maps (the driver's
// cuTensorMapEncodeTiled, reached through the runtime: no link to libcuda).
//
// A tile of R rows x 128 bf16 columns lands as its column blocks one after another, each R rows of the
// block's bytes: with 8-column blocks (16 bytes, no swizzle) element (r, c) at (c/8)·R·16 + r·16 + (c%8)·2,
// the "image" layout of the wgmma kernels (gdn/wgmma_tiles.cuh); with 16-column blocks (32 bytes, TMA's
// 32-byte swizzle, the wgmma layouts of swizzle mode 3) at (c/16)·R·32 + r·32 + ((c/8 % 2) ^ (r/4 % 2))·16 +
// (c%8)·2. A map walks a row-major [rows][heads][128] tensor as (block elements, rows, column block, head):
// the block's stride (16 or 32 bytes) is smaller than the rows', so one box writes a whole tile. Drivers that
// refuse the out-of-order strides get the in-order map (block elements, head·blocks + block, rows) and one
// box per column block (ImageMap::one_box false).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deltatune::kernels::tma {

struct ImageMap {
  CUtensorMap map;
  int rows;      // R: rows of a box
  int blocks;    // column blocks of a row: 16 (16 bytes, no swizzle) or 8 (32 bytes, swizzled)
  int tile;      // column blocks of a tile (all of a row's, or `cols` of them)
  int width;     // elements of a head's row: 128, or 64 (the 64 x 64 chunk matrices)
  bool one_box;  // the whole tile in one copy (else one per column block)
};

// Encodes a map over a row-major bf16 tensor [nrows][heads][128] (base 16-byte aligned) for tiles of R rows
// of one head, in 16-byte blocks or (sw32) 32-byte swizzled ones. false where the driver refuses both forms
// or the device has no TMA.
// cols < width: tiles of that many columns (a multiple of the block), from any block-aligned column.
// width 64 (sw32 only): rows of 64 elements, [nrows][heads][64].
// one_box false: the in-order map (one copy per column block) even where the one-copy map is accepted (the
// fallback where the driver refuses it; the TMA test checks both).
bool encode_image_map(ImageMap& m, const void* base, int64_t nrows, int64_t heads, int rows,
                      bool sw32 = false, int cols = 128, int width = 128, bool one_box = true);

#if defined(__CUDACC__)
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes a barrier's initialisation visible to the async proxy (the copies' complete_tx); a block barrier
// follows.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` more to land in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Expects `bytes` more to land in the current phase, without an arrival.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One arrival (release: this thread's earlier shared-memory writes are seen by the waiters of the phase).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nTMA_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra TMA_WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void copy3(uint32_t dst, const CUtensorMap* m, int c0, int c1, int c2,
                                      uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void copy4(uint32_t dst, const CUtensorMap* m, int c0, int c1, int c2, int c3,
                                      uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// counted on bar (no tensor map: cp.async.bulk).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// Rows row0 .. row0 + R − 1 of head h, columns col0 .. (a tile's width) as an image tile at dst (rows past
// the tensor's end: zeros), counted on bar: R·(tile's width)·2 bytes.
__device__ __forceinline__ void image_tile(uint32_t dst, const ImageMap& m, int row0, int h, uint32_t bar,
                                           int col0 = 0) {
  const int b0 = col0 / (m.width / m.blocks);
  if (m.one_box) {
    copy4(dst, &m.map, 0, row0, b0, h, bar);
  } else {
    const int block_bytes = 2 * m.width / m.blocks;
#pragma unroll 1
    for (int b = 0; b < m.tile; ++b)
      copy3(dst + b * m.rows * block_bytes, &m.map, 0, h * m.blocks + b0 + b, row0, bar);
  }
}

// Multicast forms (clusters): the same copies into the shared memory of every block of the cluster in mask
// (bit b: block rank b), at the same offsets there, each counted on that block's barrier at bar's offset.
__device__ __forceinline__ void copy3_mc(uint32_t dst, const CUtensorMap* m, int c0, int c1, int c2,
                                         uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
      : "memory");
}
__device__ __forceinline__ void copy4_mc(uint32_t dst, const CUtensorMap* m, int c0, int c1, int c2, int c3,
                                         uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
      : "memory");
}
// image_tile into the blocks of the cluster in mask; mask 0: into this block only (image_tile).
__device__ __forceinline__ void image_tile_mc(uint32_t dst, const ImageMap& m, int row0, int h, uint32_t bar,
                                              uint16_t mask, int col0 = 0) {
  const int b0 = col0 / (m.width / m.blocks);
  if (mask == 0) {
    image_tile(dst, m, row0, h, bar, col0);
  } else if (m.one_box) {
    copy4_mc(dst, &m.map, 0, row0, b0, h, bar, mask);
  } else {
    const int block_bytes = 2 * m.width / m.blocks;
#pragma unroll 1
    for (int b = 0; b < m.tile; ++b)
      copy3_mc(dst + b * m.rows * block_bytes, &m.map, 0, h * m.blocks + b0 + b, row0, bar, mask);
  }
}
#endif

}  // namespace deltatune::kernels::tma
