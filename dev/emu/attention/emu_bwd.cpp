// Host-emulated backward kernels (see attention_emu.cpp).
#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char smem_raw[232448];
}
}  // namespace deltatune::kernels
#include "attention/attention_bwd_mma.cu"

namespace deltatune::kernels {
void emu_attention_dkdv_wgmma(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                              const int32_t* k_tiles, int ntiles, int64_t T, int nH, int nKV, float scale,
                              bool causal, KOut dk, KOut dv, float* part);
void emu_attention_dq_wgmma(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                            const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                            const int32_t* q_tiles, int ntiles, int nH, int nKV, float scale, bool causal, KOut dq);

template <int HD, int QW, bool CAUSAL>
void emu_bwd_hd(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                const float* lse, const float* dl, const int32_t* cu, const int32_t* q_tiles, const int32_t* k_tiles,
                int ntiles, int64_t T, int nH, int nKV, float scale, KOut dq, KOut dk, KOut dv, float* part) {
  float* pp = nH > nKV ? part : nullptr;
  emu::launch(dim3(nH, ntiles), KV_NT, smem_raw, dkdv_smem<HD, QW>(), [&] {
    attention_dkdv_mma_kernel<HD, QW, CAUSAL>(dout, q, k, v, lse, dl, cu, k_tiles, T, nH, nKV, scale, dk, dv, pp);
  });
  if (pp) {
    emu::launch(dim3(3), 64, smem_raw, 16, [&] { attn_group_sum_kernel(pp, T, nH, nKV, HD, dk); });
    emu::launch(dim3(3), 64, smem_raw, 16, [&] { attn_group_sum_kernel(pp + T * nH * HD, T, nH, nKV, HD, dv); });
  }
  emu::launch(dim3(nH, ntiles), Q_NT, smem_raw, dq_smem<HD>(), [&] {
    attention_dq_mma_kernel<HD, CAUSAL>(dout, q, k, v, lse, dl, cu, q_tiles, nH, nKV, scale, dq);
  });
}
void emu_attention_bwd(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                       const int32_t* q_tiles, const int32_t* k_tiles, int ntiles, int64_t T, int nH, int nKV, int hd,
                       float scale, bool causal, KOut dq, KOut dk, KOut dv, float* part, bool portable,
                       bool hopper) {
  if (hopper) {  // launch_attention_bwd_mma under the Hopper policy at hd 256 (nH / nKV even)
    emu_attention_dkdv_wgmma(dout, q, k, v, lse, dl, cu, k_tiles, ntiles, T, nH, nKV, scale, causal, dk, dv, part);
    emu_attention_dq_wgmma(dout, q, k, v, lse, dl, cu, q_tiles, ntiles, nH, nKV, scale, causal, dq);
    return;
  }
  auto go = [&]<int HD, int QW>() {
    (causal ? emu_bwd_hd<HD, QW, true> : emu_bwd_hd<HD, QW, false>)(dout, q, k, v, lse, dl, cu, q_tiles, k_tiles,
                                                                    ntiles, T, nH, nKV, scale, dq, dk, dv, part);
  };
  if (hd == 64) go.template operator()<64, BT>();
  else if (hd == 96) go.template operator()<96, BT>();
  else if (hd == 128) go.template operator()<128, BT>();
  else if (portable) go.template operator()<256, portable_qw<256>()>();  // the portable policy's 16-row steps
  else go.template operator()<256, BT>();
}
}  // namespace deltatune::kernels
