// Host-emulated Hopper dQ kernel (attention_dq_wgmma.cu; see attention_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(128) unsigned char attn_smem[232448];
}
}  // namespace deltatune::kernels
#include "attention/attention_dq_wgmma.cu"

namespace deltatune::kernels {
void emu_attention_dq_wgmma(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                            const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                            const int32_t* q_tiles, int ntiles, int nH, int nKV, float scale, bool causal, KOut dq) {
  emu::launch(dim3(nH / NG, ntiles), NT, attn_smem, wg_dq_smem<256>(), [&] {
    (causal ? attention_dq_wgmma_kernel<256, true, false> : attention_dq_wgmma_kernel<256, false, false>)(
        attn_wgmma::KVMaps{}, dout, q, k, v, lse, dl, cu, q_tiles, nH, nKV, scale, dq);
  });
}
}  // namespace deltatune::kernels
