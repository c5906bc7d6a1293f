// Host-emulated FMA forward kernels (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) float sm[232448 / 4];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_fwd.cu"
#include "emu/gdn/emu_api.h"

namespace deltatune::kernels::gdn_emu {
static unsigned char* raw() { return reinterpret_cast<unsigned char*>(sm); }
void prep(const Shape& s, const float* qn, const float* kn, KIn v, const float* g, KIn beta, float* W, float* U,
          float* M, float* Gc, float* Tout) {
  emu::launch(dim3(s.nchunks, s.HV), kThreads, raw(), gdn_chunk_prep_smem(s.dk, s.dv), [&] {
    gdn_chunk_prep_kernel(qn, kn, v, g, beta, s.chunks, W, U, M, Gc, Tout, s.HK, s.HV, s.dk, s.dv);
  });
}
void scan(const Shape& s, const float* qn, const float* kn, const float* W, const float* U, const float* M,
          const float* Gc, KOut o, float* states, float* vnew) {
  emu::launch(dim3(s.nseq * s.HV, (s.dv + kChunkBV - 1) / kChunkBV), kThreads, raw(), gdn_chunk_scan_smem(s.dk, s.dv),
              [&] {
                gdn_chunk_scan_kernel<kChunkBV>(qn, kn, W, U, M, Gc, s.chunks, s.chunk_off, o, states, vnew, s.HK,
                                                s.HV, s.dk, s.dv);
              });
}
}  // namespace deltatune::kernels::gdn_emu
