// Host-emulated tensor-core forward scan (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_scan_mma.cu"
#include "emu/gdn/emu_api.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace deltatune::kernels::gdn_emu {
void scan_mma(const Shape& s, int bv, bool pf, const float* qn, const float* kn, const float* W, const float* U,
              const float* M, const float* Gc, KOut o, float* states, float* vnew, const GdnScanBf16* b16) {
  const bool use_b16 = scan_mma_b16(b16, o.p != nullptr);
  const GdnScanBf16 h = use_b16 ? *b16 : GdnScanBf16{};
  // The kernel writes bf16 states and V'; widened back for the fp32 comparisons.
  std::vector<bf16> st16(states ? size_t(s.nchunks) * s.HV * s.dk * s.dv : 0), vn16;
  int64_t T = 0;
  for (int c = 0; c < s.nchunks; ++c) T = std::max<int64_t>(T, s.chunks[2 * c] + s.chunks[2 * c + 1]);
  if (vnew) vn16.assign(size_t(T) * s.HV * s.dv, __float2bfloat16_rn(0.f));
  // bv 64 (8 warps) exists only with the bf16 operands and prefetch.
  const bool with_o = o.p != nullptr;
  const bool found = with_scan_variant(bv, pf, with_o, use_b16, [&](auto bv_c, auto pf_c, auto o_c, auto b16_c) {
    constexpr int BV = decltype(bv_c)::value;
    constexpr bool PF = decltype(pf_c)::value, WITH_O = decltype(o_c)::value, B16 = decltype(b16_c)::value;
    constexpr size_t smem = scan_mma_smem<BV, PF, WITH_O, B16>();
    static_assert(smem <= sizeof(gdn_smem), "the emulator's shared memory");
    emu::launch(dim3(s.nseq * s.HV, s.dv / BV), scan_threads<BV>(), gdn_smem, smem, [&] {
      gdn_chunk_scan_mma_kernel<BV, PF, WITH_O, B16>(
          qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states ? st16.data() : nullptr,
          vnew ? vn16.data() : nullptr, s.HK, s.HV, static_cast<const bf16*>(h.W),
          static_cast<const bf16*>(h.Kd), static_cast<const bf16*>(h.Q), static_cast<const bf16*>(h.M),
          h.states_even);
    });
  });
  if (!found) {
    std::fprintf(stderr, "scan_mma: no variant bv %d pf %d b16 %d\n", bv, int(pf), int(use_b16));
    std::abort();
  }
  if (states) from_bf16(st16, states);
  if (vnew) from_bf16(vn16, vnew);
}
}  // namespace deltatune::kernels::gdn_emu
