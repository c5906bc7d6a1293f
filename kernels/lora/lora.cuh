// Launchers for LoRA products: the backward's two that read the output gradient (lora_dy.cu), the forward's
// rank-r term (lora_up.cu), SwiGLU with the rank-r terms of its neighbours (lora_swiglu.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/kernel_policy.h"

namespace deltatune::kernels {

// du (=) alpha·dy·B and gB (+=) alpha·dyᵀ·u with dy read once. dy bf16 [T, N] (row stride ldy), B bf16 [N, r]
// (contiguous), u and du bf16 [T, r] column blocks (row strides ldu, lddu), gB F32 [N, r] (contiguous). dy, B and
// u 16-byte aligned (rows too); du and gB are written one value at a time.
// scratch: F32 partial sums of lora_dy_scratch_bytes (a buffer the caller owns, stream-ordered).
struct LoraDyArgs {
  const void* dy = nullptr;
  const void* B = nullptr;
  const void* u = nullptr;
  void* du = nullptr;
  float* gB = nullptr;
  int64_t T = 0, N = 0, ldy = 0, ldu = 0, lddu = 0;
  int r = 0;
  float alpha = 1.f;
};
// Bytes of scratch the launch needs for these shapes on this device; 0 when the kernel does not take them (r not
// 16, N not a multiple of 64, misaligned rows): the caller then runs the two products as GEMMs.
size_t lora_dy_scratch_bytes(const LoraDyArgs& a, const KernelPolicy& policy);
cudaError_t launch_lora_dy(const LoraDyArgs& a, void* scratch, const KernelPolicy& policy, cudaStream_t s);

// y (=) alpha·u·Bᵀ (+ res) (lora_up.cu): u bf16 [T, r] column block (row stride ldu), B bf16 [N, r] (contiguous),
// y and res bf16 [T, N] (row strides ldy, ldres; res may be y itself, or null). r = 16, N a multiple of 8, every
// pointer and row 16-byte aligned (lora_up_takes); otherwise the caller runs a GEMM.
struct LoraUpArgs {
  const void* u = nullptr;
  const void* B = nullptr;
  const void* res = nullptr;
  void* y = nullptr;
  int64_t T = 0, N = 0, ldu = 0, ldres = 0, ldy = 0;
  int r = 0;
  float alpha = 1.f;
};
bool lora_up_takes(const LoraUpArgs& a);
cudaError_t launch_lora_up(const LoraUpArgs& a, cudaStream_t s);

// h (=) silu(g + ag·ug·Bgᵀ) ⊙ (u + au·uu·Buᵀ) (lora_swiglu.cu), with keep_sums g and u (=) the two sums: g, u, h
// bf16 [T, N] (contiguous), ug and uu bf16 [T, r] column blocks (row strides ldug, lduu), Bg and Bu bf16 [N, r]
// (contiguous). Each sum is rounded to bf16 once (as lora_up with the residual in place) and h formed from the
// rounded sums (as swiglu_fwd). r = 16, N a multiple of 8, every pointer and row 16-byte aligned
// (lora_swiglu_fwd_takes); otherwise the caller runs lora_up twice and swiglu_fwd.
struct LoraSwigluArgs {
  const void *ug = nullptr, *uu = nullptr, *Bg = nullptr, *Bu = nullptr;
  void *g = nullptr, *u = nullptr, *h = nullptr;
  int64_t T = 0, N = 0, ldug = 0, lduu = 0;
  int rg = 0, ru = 0;
  float ag = 1.f, au = 1.f;
  bool keep_sums = true;
};
bool lora_swiglu_fwd_takes(const LoraSwigluArgs& a);
cudaError_t launch_lora_swiglu_fwd(const LoraSwigluArgs& a, cudaStream_t s);

// dh' = dh + dr·A rounded to bf16 once (as a GEMM with beta = 1), then dg (=) dh'·u·silu'(g), du (=) dh'·silu(g)
// (as swiglu_bwd) (lora_swiglu.cu); dh' is not written. dh, g, u, dg, du bf16 [T, N] (contiguous), dr bf16 [T, r],
// A bf16 [r, N] (contiguous). With ug set, g and u are the gate/up base products and the sums g + ag·ug·Bgᵀ,
// u + au·uu·Buᵀ are formed as lora_swiglu_fwd forms them (ug, uu, Bg, Bu as there). r = 16 (rg, ru too), N a
// multiple of 8, pointers 16-byte aligned (lora_swiglu_bwd_takes); otherwise the caller runs the default.
struct LoraSwigluBwdArgs {
  const void *dh = nullptr, *dr = nullptr, *A = nullptr, *g = nullptr, *u = nullptr;
  void *dg = nullptr, *du = nullptr;
  int64_t T = 0, N = 0;
  int r = 0;
  const void *ug = nullptr, *uu = nullptr, *Bg = nullptr, *Bu = nullptr;  // the gate/up terms, or null
  int64_t ldug = 0, lduu = 0;
  int rg = 0, ru = 0;
  float ag = 1.f, au = 1.f;
};
bool lora_swiglu_bwd_takes(const LoraSwigluBwdArgs& a);
cudaError_t launch_lora_swiglu_bwd(const LoraSwigluBwdArgs& a, cudaStream_t s);

}  // namespace deltatune::kernels
