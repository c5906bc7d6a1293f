// Host-emulated Hopper forward kernel (attention_fwd_wgmma.cu; see attention_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(128) unsigned char attn_smem[232448];
}
}  // namespace deltatune::kernels
#include "attention/attention_fwd_wgmma.cu"

namespace deltatune::kernels {
void emu_attention_fwd_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const int32_t* cu, const int32_t* tiles, int ntiles, int nH, int nKV, float scale,
                             bool causal, KOut o, float* lse) {
  emu::launch(dim3(nH / NG, ntiles), NT, attn_smem, wg_fwd_smem<256>(), [&] {
    (causal ? attention_fwd_wgmma_kernel<256, true, false> : attention_fwd_wgmma_kernel<256, false, false>)(
        attn_wgmma::KVMaps{}, q, k, v, cu, tiles, nH, nKV, scale, o, lse);
  });
}
}  // namespace deltatune::kernels
