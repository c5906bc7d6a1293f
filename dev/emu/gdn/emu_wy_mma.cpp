// Host-emulated tensor-core WY backward kernel (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_wy_mma.cu"
#include "emu/gdn/emu_api.h"

namespace deltatune::kernels::gdn_emu {
void wy_grad_mma(const Shape& s, const float* kn, KIn v, KIn beta, const float* Gc, const float* Tm,
                 float* dW, const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta,
                 const GdnQK* raw) {
  int64_t T = 0;  // tokens: the end of the last chunk
  for (int c = 0; c < s.nchunks; ++c)
    T = std::max<int64_t>(T, int64_t(s.chunks[2 * c]) + s.chunks[2 * c + 1]);
  const auto T16 = to_bf16(Tm, int64_t(s.nchunks) * s.HV * C * C);
  const auto dW16 = to_bf16(dW, T * s.HV * s.dk), dvn16 = to_bf16(dvn, T * s.HV * s.dv);
  const auto dkp16 =
      to_bf16(dkh, T * s.HV * s.dk);  // the partial sums arrive in bf16, as the kernel writes them
  // The kernel writes the sum (dkh + its terms) as bf16 into another buffer: widened back into dkh (+=).
  std::vector<bf16> dk16(T * s.HV * s.dk, __float2bfloat16_rn(0.f));
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, wy_grad_mma_smem<128, 128>(), [&] {
    const GdnQK qk = raw ? *raw : GdnQK{{nullptr, KType::F32}, {kn, KType::F32}};
    (raw ? gdn_chunk_wy_grad_mma_kernel<128, 128, true>
         : gdn_chunk_wy_grad_mma_kernel<128, 128, false>)(qk, v, GdnGates{nullptr, beta}, Gc, s.chunks,
                                                          T16.data(), dW16.data(), dvn16.data(), dkp16.data(),
                                                          dk16.data(), dv_out,
                                                          GdnGateGrads{dg, KOut{dbeta, KType::F32}}, s.HK,
                                                          s.HV);
  });
  for (int c = 0; c < s.nchunks; ++c)
    for (int64_t e = int64_t(s.chunks[2 * c]) * s.HV * s.dk;
         e < int64_t(s.chunks[2 * c] + s.chunks[2 * c + 1]) * s.HV * s.dk; ++e)
      dkh[e] = __bfloat162float(dk16[e]);
}
}  // namespace deltatune::kernels::gdn_emu
