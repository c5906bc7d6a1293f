// Host-emulated GDN chunk kernels (see gdn_emu.cpp): one wrapper per kernel, each defined in the
// translation unit that includes the kernel's .cu file (their anonymous namespaces would collide).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "common/kptr.h"

namespace deltatune::kernels {
struct GdnScanBf16;  // gdn/gdn.cuh
struct GdnQK;        // gdn/gdn.cuh
struct GdnNormOut;
}  // namespace deltatune::kernels
namespace deltatune::kernels::gdn_emu {
// The tensor-core path's bf16 scratch (gdn.cuh, GdnBwdBf16): the wrappers below keep fp32 arguments and round
// them (to nearest even, as the producing kernels do) into bf16 copies for the kernels, and widen bf16
// outputs.
inline std::vector<__nv_bfloat16> to_bf16(const float* x, int64_t n) {
  std::vector<__nv_bfloat16> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = __float2bfloat16_rn(x[i]);
  return r;
}
inline void from_bf16(const std::vector<__nv_bfloat16>& x, float* out) {
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
}
struct Shape {
  const int32_t* chunks;
  int nchunks;
  const int32_t* chunk_off;
  int nseq;
  int64_t HK, HV;
  int dk, dv;
};
void prep(const Shape& s, const float* qn, const float* kn, KIn v, const float* g, KIn beta, float* W,
          float* U, float* M, float* Gc, float* Tout);
void scan(const Shape& s, const float* qn, const float* kn, const float* W, const float* U, const float* M,
          const float* Gc, KOut o, float* states, float* vnew);
void dscan(const Shape& s, KIn dout, const float* qn, const float* kn, const float* W, const float* M,
           const float* Gc, float* dh, float* dvn);
void state_grad(const Shape& s, KIn dout, const float* kn, const float* Gc, const float* states,
                const float* dh, const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW,
                float* gsum);
void intra_grad(const Shape& s, KIn dout, const float* qn, const float* kn, const float* Gc,
                const float* vnew, const float* gsum, float* dqh, float* dkh, float* dg);
void wy_grad(const Shape& s, const float* kn, KIn v, KIn beta, const float* Gc, const float* Tm, float* dW,
             const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta);
// tensor-core versions (chunk_bwd_mma.cu, chunk_wy_mma.cu)
void state_grad_mma(const Shape& s, KIn dout, const float* kn, const float* Gc, const float* states,
                    const float* dh, const float* vnew, const float* dvn, float* dqh, float* dkh, float* dW,
                    float* gsum);
// raw: q, k before the norm with ρ (GdnQK) in place of qn, kn when not null. dq_fused (F32 (T, HK, dk), raw
// and bf16 dO only): the kernel's fused L2 backward writes dq there instead of dqh.
void intra_grad_mma(const Shape& s, KIn dout, const float* qn, const float* kn, const float* Gc,
                    const float* vnew, const float* gsum, float* dqh, float* dkh, float* dg,
                    const GdnQK* raw = nullptr, float* dq_fused = nullptr);
void wy_grad_mma(const Shape& s, const float* kn, KIn v, KIn beta, const float* Gc, const float* Tm,
                 float* dW, const float* dvn, float* dkh, KOut dv_out, float* dg, float* dbeta,
                 const GdnQK* raw = nullptr);
// tensor-core forward scan (chunk_scan_mma.cu), bv = 16, 32 or 64 (8 warps; bf16 operands and pf
// only) value columns per block, pf: prefetching
// variant; o.p null: the variant without output; b16: the prep's bf16 operands (the variant that copies them,
// when complete), else the fp32-staging variant
void scan_mma(const Shape& s, int bv, bool pf, const float* qn, const float* kn, const float* W,
              const float* U, const float* M, const float* Gc, KOut o, float* states, float* vnew,
              const GdnScanBf16* b16 = nullptr);
// tensor-core forward prep (chunk_prep_mma.cu): q, k before the L2 norm (F32 here), scale: q̂'s; nout: the
// norm's outputs (null: none); b16: the scan's bf16 operands (=) where not null; states (rounded to bf16
// here, as the scan writes them) and vnew (T tokens): the backward's variant, V' instead of U
void prep_mma(const Shape& s, const float* q, const float* k, float scale, const GdnNormOut* nout, KIn v,
              const float* g, KIn beta, float* W, float* U, float* M, float* Gc, float* Tout,
              const GdnScanBf16* b16 = nullptr, const float* states = nullptr, float* vnew = nullptr,
              int64_t T = 0, bool qk_bf16 = false, const float* vkept = nullptr, float* odd = nullptr);
// (odd set: the half-states variant, GdnHalfStates: states = the even chunks' ((nchunks + 1) / 2 slots),
// vkept = the forward's V' (T tokens), odd (=) the odd chunks' states (nchunks / 2 slots); qk_bf16 and a BF16
// v only.)
// q̂ = scale·x/‖x‖ per row of 128 (and ρ when not null) exactly as the device computes it (gdn/l2norm_row.cuh:
// 4 values per lane, fused multiply-add as the host compiles it, xor-butterfly warp sum).
std::vector<float> l2_rows(const std::vector<float>& x, float scale, std::vector<float>* rho = nullptr);

// tensor-core reverse state scan (chunk_dscan_mma.cu), bv = 16, 32 or 64 value columns per block; lo_s /
// lo_v: the bf16 lo halves of dS and dV' take part (the launcher's configuration: neither). W and M are
// rounded to bf16 (the prep's W16, M16) and the kernel's bf16 dh, dvn widened. qk: GdnQK (gdn/gdn.cuh).
// one_set: the portable policy's variant with one set of chunk operands (no lo halves). img: W and M passed
// to the kernel as operand images (gdn_scan_image_index), the launcher's variant only.
void dscan_mma(const Shape& s, int bv, bool lo_s, bool lo_v, KIn dout, const GdnQK& qk, const float* W,
               const float* M, const float* Gc, float* dh, float* dvn, bool one_set = false,
               bool img = false);
}  // namespace deltatune::kernels::gdn_emu
