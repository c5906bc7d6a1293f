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
// W16, M16 as the forward prep's operand images (gdn_scan_image_index; W's rows past a chunk's end zero).
static void to_images(const Shape& s, std::vector<bf16>& W16, std::vector<bf16>& M16) {
  std::vector<bf16> wi(int64_t(s.nchunks) * s.HV * C * DK, __float2bfloat16_rn(0.f)), mi(M16.size());
  for (int ch = 0; ch < s.nchunks; ++ch)
    for (int64_t h = 0; h < s.HV; ++h) {
      const int64_t t0 = s.chunks[2 * ch], len = s.chunks[2 * ch + 1], tile = ch * s.HV + h;
      for (int r = 0; r < C; ++r) {
        for (int c = 0; c < DK && r < len; ++c)
          wi[tile * C * DK + gdn_scan_image_index(r, c)] = W16[((t0 + r) * s.HV + h) * DK + c];
        for (int c = 0; c < C; ++c)
          mi[tile * C * C + gdn_scan_image_index(r, c)] = M16[tile * C * C + r * C + c];
      }
    }
  W16 = std::move(wi), M16 = std::move(mi);
}

template <int BV, bool LoS, bool LoV, bool OneSet = false>
static void run_dscan_mma(const Shape& s, KIn dout, const GdnQK& qk, const float* W, const float* M,
                          const float* Gc, float* dh, float* dvn, bool img = false) {
  const int64_t T = s.chunks[2 * (s.nchunks - 1)] + s.chunks[2 * s.nchunks - 1];
  std::vector<bf16> W16 = to_bf16(W, T * s.HV * DK), M16 = to_bf16(M, int64_t(s.nchunks) * s.HV * C * C);
  if (img) to_images(s, W16, M16);
  const bf16 nan = __float2bfloat16_rn(std::nanf(""));  // rows the kernel leaves unwritten stay NaN
  std::vector<bf16> dh16(int64_t(s.nchunks) * s.HV * DK * DV, nan), dvn16(T * s.HV * DV, nan);
  emu::launch(dim3(s.nseq * s.HV, DV / BV), NT, gdn_smem, DscanSmem<BV, LoS, LoV, OneSet>::total, [&] {
    (qk.rq ? gdn_chunk_dscan_mma_kernel<BV, LoS, LoV, true, OneSet>
           : gdn_chunk_dscan_mma_kernel<BV, LoS, LoV, false, OneSet>)(dout, qk, W16.data(), M16.data(), Gc,
                                                                      s.chunks, s.chunk_off, dh16.data(),
                                                                      dvn16.data(), s.HK, s.HV, img);
  });
  from_bf16(dh16, dh);
  from_bf16(dvn16, dvn);
}
template <int BV>
static void dscan_bv(const Shape& s, bool lo_s, bool lo_v, KIn dout, const GdnQK& qk, const float* W,
                     const float* M, const float* Gc, float* dh, float* dvn, bool one_set, bool img) {
  if (img) {  // the Hopper launcher's configuration (two sets, no lo halves)
    if (lo_s || lo_v || one_set)
      throw std::invalid_argument("dscan_mma: images with the launcher's variant only");
    return run_dscan_mma<BV, false, false>(s, dout, qk, W, M, Gc, dh, dvn, true);
  }
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
               const float* M, const float* Gc, float* dh, float* dvn, bool one_set, bool img) {
  if (bv == 16) return dscan_bv<16>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set, img);
  if (bv == 32) return dscan_bv<32>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set, img);
  dscan_bv<64>(s, lo_s, lo_v, dout, qk, W, M, Gc, dh, dvn, one_set, img);
}
}  // namespace deltatune::kernels::gdn_emu
