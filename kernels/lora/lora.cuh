// Launchers for the LoRA backward products that read the output gradient (lora_dy.cu).
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

}  // namespace deltatune::kernels
