// Host-emulated forward kernel (see attention_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char smem_raw[232448];
}
}  // namespace deltatune::kernels
#include "attention/attention_fwd_mma.cu"

namespace deltatune::kernels {
void emu_attention_fwd_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const int32_t* cu, const int32_t* tiles, int ntiles, int nH, int nKV, float scale,
                             bool causal, KOut o, float* lse);

void emu_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* cu,
                       const int32_t* tiles, int ntiles, int nH, int nKV, int hd, float scale, bool causal, KOut o,
                       float* lse, bool hopper) {
  if (hopper) return emu_attention_fwd_wgmma(q, k, v, cu, tiles, ntiles, nH, nKV, scale, causal, o, lse);
  auto go = [&](auto kern, size_t smem) {
    emu::launch(dim3(nH, ntiles), NT, smem_raw, smem, [&] { kern(q, k, v, cu, tiles, nH, nKV, scale, o, lse); });
  };
  auto hd_go = [&]<int HD>() {
    if (causal) go(attention_fwd_mma_kernel<HD, true>, fwd_smem<HD>());
    else go(attention_fwd_mma_kernel<HD, false>, fwd_smem<HD>());
  };
  if (hd == 64) hd_go.template operator()<64>();
  else if (hd == 96) hd_go.template operator()<96>();
  else if (hd == 128) hd_go.template operator()<128>();
  else hd_go.template operator()<256>();
}
}  // namespace deltatune::kernels
