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
              const float* M, const float* Gc, KOut o, float* states, float* vnew, const GdnScanBf16* b16) {
  const bool use_b16 = scan_mma_b16(b16, o.p != nullptr);
  const GdnScanBf16 h = use_b16 ? *b16 : GdnScanBf16{};
  with_scan_variant(bv, pf, o.p != nullptr, use_b16, [&](auto bv_c, auto pf_c, auto o_c, auto b16_c) {
    constexpr int BV = decltype(bv_c)::value;
    constexpr bool PF = decltype(pf_c)::value, WITH_O = decltype(o_c)::value, B16 = decltype(b16_c)::value;
    emu::launch(dim3(s.nseq * s.HV, s.dv / BV), NT, gdn_smem, scan_mma_smem<BV, PF, WITH_O, B16>(), [&] {
      gdn_chunk_scan_mma_kernel<BV, PF, WITH_O, B16>(
          qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states, vnew, s.HK, s.HV, static_cast<const bf16*>(h.W),
          static_cast<const bf16*>(h.Kd), static_cast<const bf16*>(h.Q), static_cast<const bf16*>(h.M));
    });
  });
}
}  // namespace deltatune::kernels::gdn_emu
