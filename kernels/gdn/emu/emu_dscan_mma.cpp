// Host-emulated tensor-core reverse state scan (chunk_dscan_mma.cu; see gdn_emu.cpp).
#include "attention/emu/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_dscan_mma.cu"
#include "gdn/emu/emu_api.h"

namespace deltatune::kernels::gdn_emu {
template <int BV, bool LoS, bool LoV>
static void run_dscan_mma(const Shape& s, KIn dout, const float* qn, const float* kn, const float* W,
                          const float* M, const float* Gc, float* dh, float* dvn) {
  emu::launch(dim3(s.nseq * s.HV, 128 / BV), NT, gdn_smem, DscanSmem<BV>::total, [&] {
    gdn_chunk_dscan_mma_kernel<BV, LoS, LoV>(dout, qn, kn, W, M, Gc, s.chunks, s.chunk_off, dh, dvn, s.HK,
                                             s.HV);
  });
}
void dscan_mma(const Shape& s, int bv, bool lo_s, bool lo_v, KIn dout, const float* qn, const float* kn,
               const float* W, const float* M, const float* Gc, float* dh, float* dvn) {
  if (bv == 16) return run_dscan_mma<16, true, true>(s, dout, qn, kn, W, M, Gc, dh, dvn);
  if (lo_s && lo_v) return run_dscan_mma<32, true, true>(s, dout, qn, kn, W, M, Gc, dh, dvn);
  if (lo_s) return run_dscan_mma<32, true, false>(s, dout, qn, kn, W, M, Gc, dh, dvn);
  if (lo_v) return run_dscan_mma<32, false, true>(s, dout, qn, kn, W, M, Gc, dh, dvn);
  run_dscan_mma<32, false, false>(s, dout, qn, kn, W, M, Gc, dh, dvn);
}
}  // namespace deltatune::kernels::gdn_emu
