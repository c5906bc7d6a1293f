// Host-emulated tensor-core backward kernels (see gdn_emu.cpp).
#include "attention/emu/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_bwd_mma.cu"
#include "gdn/emu/emu_api.h"

namespace deltatune::kernels::gdn_emu {
void state_grad_mma(const Shape& s, KIn dout, const float* kn, const float* Gc, const float* states, const float* dh,
                    const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW, float* gsum) {
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, state_grad_mma_smem<128, 128>(), [&] {
    gdn_chunk_state_grad_mma_kernel<128, 128>(dout, kn, Gc, s.chunks, states, dh, vnew, dvn, dqh, dkh, dW, gsum, s.HK,
                                              s.HV);
  });
}
void intra_grad_mma(const Shape& s, KIn dout, const float* qn, const float* kn, const float* Gc, const float* vnew,
                    const float* gsum, float* dqh, float* dkh, float* dg) {
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, intra_grad_mma_smem<128, 128>(), [&] {
    gdn_chunk_intra_grad_mma_kernel<128, 128>(dout, qn, kn, Gc, s.chunks, vnew, gsum, dqh, dkh, dg, s.HK, s.HV);
  });
}
void wy_grad_mma(const Shape& s, const float* kn, KIn v, KIn beta, const float* Gc, const float* Tm, float* dW,
                 const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta) {
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, wy_grad_mma_smem<128, 128>(), [&] {
    gdn_chunk_wy_grad_mma_kernel<128, 128>(kn, v, beta, Gc, s.chunks, Tm, dW, dvn, dkh, dv_out, dg, dbeta, s.HK, s.HV);
  });
}
}  // namespace deltatune::kernels::gdn_emu
