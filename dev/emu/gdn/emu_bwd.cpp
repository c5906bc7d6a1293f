// Host-emulated FMA backward kernels (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) float sm[232448 / 4];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_bwd.cu"
#include "emu/gdn/emu_api.h"

namespace deltatune::kernels::gdn_emu {
static unsigned char* raw() { return reinterpret_cast<unsigned char*>(sm); }
static dim3 grid(const Shape& s) { return dim3(s.nchunks, s.HV); }
void dscan(const Shape& s, KIn dout, const float* qn, const float* kn, const float* W, const float* M, const float* Gc,
           float* dh, float* dvn) {
  emu::launch(dim3(s.nseq * s.HV, (s.dv + kChunkBV - 1) / kChunkBV), kThreads, raw(), dscan_smem(s.dk), [&] {
    gdn_chunk_dscan_kernel<kChunkBV>(dout, qn, kn, W, M, Gc, s.chunks, s.chunk_off, dh, dvn, s.HK, s.HV, s.dk, s.dv);
  });
}
void state_grad(const Shape& s, KIn dout, const float* kn, const float* Gc, const float* states, const float* dh,
                const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW, float* gsum) {
  emu::launch(grid(s), kThreads, raw(), state_grad_smem(), [&] {
    gdn_chunk_state_grad_kernel(dout, kn, Gc, s.chunks, states, dh, vnew, dvn, dqh, dkh, dW, gsum, s.HK, s.HV, s.dk,
                                s.dv);
  });
}
void intra_grad(const Shape& s, KIn dout, const float* qn, const float* kn, const float* Gc, const float* vnew,
                const float* gsum, float* dqh, float* dkh, float* dg) {
  emu::launch(grid(s), kThreads, raw(), intra_smem(s.dk, s.dv), [&] {
    gdn_chunk_intra_grad_kernel(dout, qn, kn, Gc, s.chunks, vnew, gsum, dqh, dkh, dg, s.HK, s.HV, s.dk, s.dv);
  });
}
void wy_grad(const Shape& s, const float* kn, KIn v, KIn beta, const float* Gc, const float* Tm, float* dW,
             const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta) {
  emu::launch(grid(s), kThreads, raw(), wy_smem(s.dk, s.dv), [&] {
    gdn_chunk_wy_grad_kernel(kn, v, beta, Gc, s.chunks, Tm, dW, dvn, dkh, dv_out, dg, dbeta, s.HK, s.HV, s.dk, s.dv);
  });
}
}  // namespace deltatune::kernels::gdn_emu
