// Host-emulated tensor-core reverse state scan (chunk_dscan_mma.cu; see gdn_emu.cpp).
#include <stdexcept>

#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_dscan_mma.cu"
#include "emu/gdn/emu_api.h"

namespace deltatune::kernels::gdn_emu {
template <int BV, bool LoS, bool LoV, bool OneSet = false>
static void run_dscan_mma(const Shape& s, KIn dout, const GdnQK& qk, const float* W, const float* M,
                          const float* Gc, float* dh, float* dvn) {
  const int64_t T = s.chunks[2 * (s.nchunks - 1)] + s.chunks[2 * s.nchunks - 1];
  const std::vector<bf16> W16 = to_bf16(W, T * s.HV * DK), M16 = to_bf16(M, int64_t(s.nchunks) * s.HV * C * C);
  const bf16 nan = __float2bfloat16_rn(std::nanf(""));  // rows the kernel leaves unwritten stay NaN
  std::vector<bf16> dh16(int64_t(s.nchunks) * s.HV * DK * DV, nan), dvn16(T * s.HV * DV, nan);
  emu::launch(dim3(s.nseq * s.HV, DV / BV), NT, gdn_smem, DscanSmem<BV, LoS, LoV, OneSet>::total, [&] {
    (qk.rq ? gdn_chunk_dscan_mma_kernel<BV, LoS, LoV, true, OneSet>
           : gdn_chunk_dscan_mma_kernel<BV, LoS, LoV, false, OneSet>)(dout, qk, W16.data(), M16.data(), Gc, s.chunks,
                                                              s.chunk_off, dh16.data(), dvn16.data(), s.HK,
                                                              s.HV);
  });
  from_bf16(dh16, dh);
  from_bf16(dvn16, dvn);
}
template <int BV>
static void dscan_bv(const Shape& s, bool lo_s, bool lo_v, KIn dout, const GdnQK& qk, const float* W,
                     const float* M, const float* Gc, float* dh, float* dvn, bool one_set) {
  if (one_set) {  // the portable policy's variant (no lo halves, as the launcher)
    if (lo_s || lo_v) throw std::invalid_argument("dscan_mma: the one-set variant has no lo halves");
    return run_dscan_mma<BV, false, false, true>(s, dout, qk, W, M, Gc, dh, dvn);
  }
  if (lo_s && lo_v) return run_dscan_mma<BV, true, true>(s, dout, qk, W, M, Gc, dh, dvn);
  if (lo_s) return run_dscan_mma<BV, true, false>(s, dout, qk, W, M, Gc, dh, dvn);
  if (lo_v) return run_dscan_mma<BV, false, true>(s, dout, qk, W, M, Gc, dh, dvn);
  run_dscan_mma<BV, false, false>(s, dout, qk, W, M, Gc, dh, dvn);
}
void dscan_mma(const Shape& s, int bv, bool lo_s, bool lo_v, KIn dout, const GdnQK& qk, const float* W,
               const float* M, const float* Gc, float* dh, float* dvn, bool one_set) {
  if (bv == 16) return dscan_bv<16>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set);
  if (bv == 32) return dscan_bv<32>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set);
  dscan_bv<64>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set);
}
}  // namespace deltatune::kernels::gdn_emu
