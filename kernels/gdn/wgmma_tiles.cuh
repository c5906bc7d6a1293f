// Tile copies shared by the GDN scans on wgmma (chunk_scan_wgmma.cu, chunk_dscan_wgmma.cu; device only).
#pragma once
#include <cstdint>

#include "common/mma.cuh"

namespace deltatune::kernels::gdn_wgmma {

// cp.async of BYTES contiguous bytes (an operand image tile, gdn_scan_image_index) by NT threads, 16 bytes
// per thread and step: consecutive threads take consecutive pieces (whole sectors, no bank conflicts).
template <int BYTES, int NT>
__device__ __forceinline__ void cp_block(uint32_t dst, const void* src) {
  static_assert(BYTES % (16 * NT) == 0, "even split");
#pragma unroll
  for (int e = 0; e < BYTES / 16 / NT; ++e) {
    const int p = threadIdx.x + NT * e;
    mma::cp_async16(dst + 16 * p, static_cast<const unsigned char*>(src) + 16 * p, true);
  }
}

}  // namespace deltatune::kernels::gdn_wgmma
