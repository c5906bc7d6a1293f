// Host-emulated tensor-core forward prep kernel (see gdn_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char gdn_smem[232448];
}
}  // namespace deltatune::kernels
#include "gdn/chunk_prep_mma.cu"
#include "emu/gdn/emu_api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace deltatune::kernels::gdn_emu {
void prep_mma(const Shape& s, const float* q, const float* k, float scale, const GdnNormOut* nout, KIn v,
              const float* g, KIn beta, float* W, float* U, float* M, float* Gc, float* Tout,
              const GdnScanBf16* b16, const float* states, float* vnew, int64_t T, bool qk_bf16,
              const float* vkept, float* odd) {
  const GdnNormOut no = nout ? *nout : GdnNormOut{};
  const GdnScanBf16 h = b16 ? *b16 : GdnScanBf16{};
  // The kept states as the forward scan writes them (bf16; half states: the even chunks'), V' widened back.
  const int64_t mat = int64_t(s.dk) * s.dv;
  const int nslots = odd ? (s.nchunks + 1) / 2 : s.nchunks;
  std::vector<bf16> st16 = states ? to_bf16(states, nslots * s.HV * mat) : std::vector<bf16>{};
  std::vector<bf16> vn16(vnew ? size_t(T) * s.HV * s.dv : 0, __float2bfloat16_rn(0.f));
  const std::vector<bf16> vk16 = vkept ? to_bf16(vkept, T * s.HV * s.dv) : std::vector<bf16>{};
  const bf16 bnan = __float2bfloat16_rn(std::nanf(""));
  std::vector<bf16> odd16(odd ? size_t(std::max(s.nchunks / 2, 1)) * s.HV * mat : 0, bnan);  // never empty
  // qk_bf16: q and k (bf16-exact values) passed as BF16, which takes the RAW kernel when v is BF16 too.
  const int64_t nqk = qk_bf16 ? s.chunks[2 * (s.nchunks - 1)] + s.chunks[2 * s.nchunks - 1] : 0;
  const std::vector<bf16> q16 = qk_bf16 ? to_bf16(q, nqk * s.HK * s.dk) : std::vector<bf16>{},
                          k16 = qk_bf16 ? to_bf16(k, nqk * s.HK * s.dk) : std::vector<bf16>{};
  const KIn qi = qk_bf16 ? KIn{q16.data(), KType::BF16} : KIn{q, KType::F32},
            ki = qk_bf16 ? KIn{k16.data(), KType::BF16} : KIn{k, KType::F32};
  const bool raw = qk_bf16 && v.t == KType::BF16 && !no.qn;
  // Half states as the launcher runs them: the lean prep, then the odd-state kernel.
  const bool lean = odd != nullptr;
  if (lean && !(raw && Gc)) {
    std::fprintf(stderr, "prep_mma: the half-states prep needs bf16 q, k, v and Gc\n");
    std::abort();
  }
  const size_t smem = lean ? prep_mma_smem<true>() : prep_mma_smem();
  emu::launch(dim3(s.nchunks, s.HV), NT, gdn_smem, smem, [&] {
    (lean ? gdn_chunk_prep_mma_kernel<true, true>
     : raw ? gdn_chunk_prep_mma_kernel<true>
         : gdn_chunk_prep_mma_kernel<false>)(qi, ki, scale, no, v, GdnGates{g, beta}, s.chunks, W, U, M, Gc,
                                             Tout, s.HK, s.HV, static_cast<bf16*>(h.W),
                                             static_cast<bf16*>(h.Kd), static_cast<bf16*>(h.Q),
                                             static_cast<bf16*>(h.M), static_cast<bf16*>(h.T),
                                             states ? st16.data() : nullptr, vnew ? vn16.data() : nullptr,
                                             static_cast<const bf16*>(h.T_kept), h.image,
                                             static_cast<bf16*>(h.U));
  });
  if (lean && s.nchunks >= 2)
    emu::launch(dim3(s.nchunks / 2, s.HV), NT, gdn_smem, odd_states_smem(), [&] {
      gdn_odd_states_kernel(ki, no.eps, Gc, s.chunks, st16.data(), vk16.data(), odd16.data(), s.HK, s.HV,
                            s.chunk_off, s.nseq);
    });
  if (vnew) from_bf16(vn16, vnew);
  if (odd) std::transform(odd16.begin(), odd16.begin() + size_t(s.nchunks / 2) * s.HV * mat, odd,
                          [](bf16 x) { return __bfloat162float(x); });
}

std::vector<float> l2_rows(const std::vector<float>& x, float scale, std::vector<float>* rho) {
  constexpr int n = 128;
  std::vector<float> y(x.size());
  if (rho) rho->assign(x.size() / n, 0.f);
  for (size_t r = 0; r < x.size() / n; ++r) {
    float lane[32];
    for (int l = 0; l < 32; ++l) {
      float ss = 0.f;
      for (int e = 0; e < 4; ++e) ss += x[r * n + 4 * l + e] * x[r * n + 4 * l + e];
      lane[l] = ss;
    }
    for (int o = 16; o > 0; o >>= 1) {
      float nx[32];
      for (int l = 0; l < 32; ++l) nx[l] = lane[l] + lane[l ^ o];
      std::memcpy(lane, nx, sizeof lane);
    }
    const float p = rsqrtf(lane[0] + kGdnL2Eps);
    if (rho) (*rho)[r] = p;
    for (int c = 0; c < n; ++c) y[r * n + c] = scale * x[r * n + c] * p;
  }
  return y;
}
}  // namespace deltatune::kernels::gdn_emu
