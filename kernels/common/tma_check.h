// Host entry of the TMA image-tile check (common/tma_check.cu; needs a compute capability 9 GPU).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace deltatune::kernels {
// Copies the tile of rows row0 .. row0 + rows − 1, head h, columns col0 .. col0 + cols − 1 of a row-major
// bf16 tensor src [nrows][heads][width] (device memory; width 128, or 64 with sw32) into shared memory by tma::image_tile (32-byte swizzled
// blocks or 16-byte ones), reads it back through the documented element offsets and writes it row-major to
// out [rows][cols] (bf16, device memory). cudaErrorNotSupported where the driver refuses the tensor map.
cudaError_t tma_image_tile_check(const void* src, int64_t nrows, int64_t heads, int rows, bool sw32, int cols,
                                 int row0, int h, int col0, void* out, int width = 128, bool one_box = true);
}  // namespace deltatune::kernels
