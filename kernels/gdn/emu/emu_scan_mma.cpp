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
void scan_mma(const Shape& s, int bv, const float* qn, const float* kn, const float* W, const float* U, const float* M,
              const float* Gc, KOut o, float* states, float* vnew) {
  emu::launch(dim3(s.nseq * s.HV, s.dv / bv), NT, gdn_smem, gdn_chunk_scan_mma_smem(s.dk, s.dv, bv), [&] {
    if (bv == kChunkBV)
      gdn_chunk_scan_mma_kernel<kChunkBV>(qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states, vnew, s.HK, s.HV);
    else
      gdn_chunk_scan_mma_kernel<kChunkBV / 2>(qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states, vnew, s.HK,
                                              s.HV);
  });
}
}  // namespace deltatune::kernels::gdn_emu
