// Host-emulated Hopper dK/dV kernel (attention_dkdv_wgmma.cu; see attention_emu.cpp).
#include <vector>

#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(128) unsigned char attn_smem[232448];
}
}  // namespace deltatune::kernels
#include "attention/attention_dkdv_wgmma.cu"

namespace deltatune::kernels {
void emu_attention_dkdv_wgmma(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                              const int32_t* k_tiles, int ntiles, int64_t T, int nH, int nKV, float scale,
                              bool causal, KOut dk, KOut dv, float* part) {
  float* pp = attention_dkdv_wgmma_partial_heads(nH, nKV) ? part : nullptr;
  std::vector<unsigned> cnt(size_t(ntiles) * nKV, 0u);  // finished head pairs per (key tile, kv head)
  emu::launch(dim3(nH / HP, ntiles), NT, attn_smem, wg_dkdv_smem<256>(), [&] {
    (causal ? attention_dkdv_wgmma_kernel<256, true, false> : attention_dkdv_wgmma_kernel<256, false, false>)(
        attn_wgmma::KVMaps{}, ntiles, dout, q, k, v, lse, dl, cu, k_tiles, T, nH, nKV, scale, dk, dv, pp,
        pp ? cnt.data() : nullptr);
  });
}
}  // namespace deltatune::kernels
