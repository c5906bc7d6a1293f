// Host side of common/tma.cuh: tensor maps for image-layout tiles.
#include <cudaTypedefs.h>

#include <cstdlib>

#include "common/tma.cuh"

namespace deltatune::kernels::tma {

namespace {
// The driver's cuTensorMapEncodeTiled (null where the driver has none), looked up once: a constant of the
// process, read by every launch that encodes maps.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry() {
  static const PFN_cuTensorMapEncodeTiled_v12000 entry = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                     &found) == cudaSuccess &&
                    found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn) : nullptr;
  }();
  return entry;
}
}  // namespace

bool encode_image_map(ImageMap& m, const void* base, int64_t nrows, int64_t heads, int rows, bool sw32,
                      int cols, int width, bool one_box) {
  const auto encode = encode_tiled_entry();
  if (encode == nullptr || (width != 128 && !(width == 64 && sw32)) || cols > width) return false;
  m.rows = rows;
  m.width = width;
  m.blocks = (sw32 ? 8 : 16) * width / 128;
  const cuuint32_t block_elems = width / m.blocks, block_bytes = 2 * block_elems;
  m.tile = cols / static_cast<int>(block_elems);
  const CUtensorMapSwizzle swizzle = sw32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
  void* p = const_cast<void*>(base);
  const cuuint64_t head_bytes = 2 * static_cast<cuuint64_t>(width), row_bytes = heads * head_bytes;
  const cuuint32_t ones[4] = {1, 1, 1, 1};
  if (one_box) {
    const cuuint64_t dim[4] = {block_elems, static_cast<cuuint64_t>(nrows), static_cast<cuuint64_t>(m.blocks),
                               static_cast<cuuint64_t>(heads)};
    const cuuint64_t stride[3] = {row_bytes, block_bytes, head_bytes};
    const cuuint32_t box[4] = {block_elems, static_cast<cuuint32_t>(rows), static_cast<cuuint32_t>(m.tile),
                               1};
    if (encode(&m.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, p, dim, stride, box, ones,
               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS) {
      m.one_box = true;
      return true;
    }
  }
  const cuuint64_t dim[3] = {block_elems, static_cast<cuuint64_t>(heads) * m.blocks,
                             static_cast<cuuint64_t>(nrows)};
  const cuuint64_t stride[2] = {block_bytes, row_bytes};
  const cuuint32_t box[3] = {block_elems, 1, static_cast<cuuint32_t>(rows)};
  m.one_box = false;
  return encode(&m.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p, dim, stride, box, ones,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace deltatune::kernels::tma
