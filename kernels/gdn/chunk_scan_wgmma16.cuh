// The GDN forward scan at 16 value columns with O a chunk behind (chunk_scan_wgmma16.cu; Hopper, sm_90a).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gdn/gdn.cuh"

namespace deltatune::kernels {

// launch_gdn_chunk_scan_wgmma's kernel at bv 16 (its contract): the warpgroups split by role, O a chunk behind,
// tiles three chunks deep.
cudaError_t launch_gdn_chunk_scan_wgmma16(const KernelPolicy& pol, const float* Gc, const int32_t* chunks,
                                          const int32_t* chunk_off, int nseq, KOut o, void* states16,
                                          void* vnew16, int64_t HK, int64_t HV, const GdnScanBf16& b16,
                                          cudaStream_t s);

}  // namespace deltatune::kernels
