// Host-emulated tensor-core backward kernels (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "gdn/chunk_bwd_mma.cu"
#include "emu/gdn/emu_api.h"

namespace deltatune::kernels::gdn_emu {
namespace {
// State products and intra terms are one kernel (gdn_chunk_grad_mma_kernel) that needs the arguments of both
// wrappers, as the launchers: state_grad_mma keeps its bf16 inputs and outputs, intra_grad_mma runs the
// kernel.
struct StateGrad {
  bool set = false;
  std::vector<bf16> states, dh, vnew, dvn, dW;
  float *dqh, *dkh, *dW32, *gsum;
};
StateGrad pending;
}  // namespace

void state_grad_mma(const Shape& s, KIn dout, const float* kn, const float* Gc, const float* states,
                    const float* dh, const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW,
                    float* gsum) {
  int64_t T = 0;
  for (int c = 0; c < s.nchunks; ++c) T = std::max<int64_t>(T, s.chunks[2 * c] + s.chunks[2 * c + 1]);
  const int64_t ns = int64_t(s.nchunks) * s.HV * s.dk * s.dv, nv = T * s.HV * s.dv;
  pending = StateGrad{true,
                      to_bf16(states, ns),
                      to_bf16(dh, ns),
                      to_bf16(vnew, nv),
                      to_bf16(dvn, nv),
                      to_bf16(dW, nv),
                      dqh,
                      dkh,
                      dW,
                      gsum};
}
void intra_grad_mma(const Shape& s, KIn dout, const float* qn, const float* kn, const float* Gc,
                    const float* vnew, const float* gsum, float* dqh, float* dkh, float* dg, const GdnQK* raw,
                    float* dq_fused) {
  StateGrad& p = pending;
  if (!p.set || p.dqh != dqh || p.dkh != dkh || p.gsum != gsum) {
    std::fprintf(stderr, "intra_grad_mma without the matching state_grad_mma\n");
    std::abort();
  }
  // A persistent grid of 3 blocks: several items (or groups of HV/HK items) per block, and blocks with
  // different counts.
  const int items = s.nchunks * int(s.HV);
  const KOut dq = dq_fused ? KOut{dq_fused, KType::F32} : KOut{};
  if (dq_fused && !(raw && gdn_grad_fuses_dq(*raw, dout, dq, s.HK, s.HV))) {
    std::fprintf(stderr, "intra_grad_mma: the fused dq needs bf16 q, k with rho and bf16 dO\n");
    std::abort();
  }
  const int groups = dq_fused ? items / int(s.HV / s.HK) : items;
  // The kernel's bf16 dq̂ and dk̂ partial sums, widened.
  std::vector<bf16> dq16(p.vnew.size() / s.dv * s.dk, __float2bfloat16_rn(0.f)), dk16(dq16.size(), dq16[0]);
  emu::launch(dim3(std::min(groups, 3)), NT, gdn_smem,
              raw ? grad_mma_smem<128, 128, true>() : grad_mma_smem<128, 128, false>(), [&] {
                const GdnQK qk = raw ? *raw : GdnQK{{qn, KType::F32}, {kn, KType::F32}};
                (raw ? gdn_chunk_grad_mma_kernel<128, 128, true>
                     : gdn_chunk_grad_mma_kernel<128, 128, false>)(dout, qk, Gc, s.chunks, items,
                                                                   p.states.data(), p.dh.data(),
                                                                   p.vnew.data(), p.dvn.data(), dq16.data(),
                                                                   dk16.data(), p.dW.data(), p.gsum, dg, s.HK,
                                                                   s.HV, dq, nullptr);
              });
  // Rows the kernel writes (those of the chunks) are widened; the others keep what the caller put there.
  for (int c = 0; c < s.nchunks; ++c)
    for (int64_t e = int64_t(s.chunks[2 * c]) * s.HV * s.dk;
         e < int64_t(s.chunks[2 * c] + s.chunks[2 * c + 1]) * s.HV * s.dk; ++e) {
      dqh[e] = __bfloat162float(dq16[e]);
      dkh[e] = __bfloat162float(dk16[e]);
    }
  from_bf16(p.dW, p.dW32);
  p = StateGrad{};
}
}  // namespace deltatune::kernels::gdn_emu
