// Host-emulated tensor-core forward prep kernel (see gdn_emu.cpp).
#include "attention/emu/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_prep_mma.cu"
#include "gdn/emu/emu_api.h"

namespace deltatune::kernels::gdn_emu {
void prep_mma(const Shape& s, const float* qn, const float* kn, KIn v, const float* g, KIn beta, float* W,
              float* U, float* M, float* Gc, float* Tout, const GdnScanBf16* b16) {
  const GdnScanBf16 h = b16 ? *b16 : GdnScanBf16{};
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, gdn_chunk_prep_mma_smem(s.dk, s.dv), [&] {
    gdn_chunk_prep_mma_kernel(qn, kn, v, g, beta, s.chunks, W, U, M, Gc, Tout, s.HK, s.HV, static_cast<bf16*>(h.W),
                              static_cast<bf16*>(h.Kd), static_cast<bf16*>(h.Q), static_cast<bf16*>(h.M),
                              static_cast<bf16*>(h.T));
  });
}
}  // namespace deltatune::kernels::gdn_emu
