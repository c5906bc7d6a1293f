// Host-emulated tensor-core forward scan (see gdn_emu.cpp).
#include "attention/emu/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_scan_mma.cu"
#include "gdn/emu/emu_api.h"

namespace deltatune::kernels::gdn_emu {
void scan_mma(const Shape& s, int bv, bool pf, const float* qn, const float* kn, const float* W, const float* U,
              const float* M, const float* Gc, KOut o, float* states, float* vnew) {
  const size_t smem = bv == kChunkBV ? (pf ? scan_mma_smem<kChunkBV, true>() : scan_mma_smem<kChunkBV, false>())
                                     : (pf ? scan_mma_smem<kChunkBV / 2, true>() : scan_mma_smem<kChunkBV / 2, false>());
  emu::launch(dim3(s.nseq * s.HV, s.dv / bv), NT, gdn_smem, smem, [&] {
    auto run = [&](auto kernel) {
      kernel(qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states, vnew, s.HK, s.HV);
    };
    if (bv == kChunkBV)
      pf ? run(gdn_chunk_scan_mma_kernel<kChunkBV, true>) : run(gdn_chunk_scan_mma_kernel<kChunkBV, false>);
    else
      pf ? run(gdn_chunk_scan_mma_kernel<kChunkBV / 2, true>) : run(gdn_chunk_scan_mma_kernel<kChunkBV / 2, false>);
  });
}
}  // namespace deltatune::kernels::gdn_emu
