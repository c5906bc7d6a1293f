// Which kernels run on one device: chosen once when the CUDA backend starts (from the compute capability, the
// SM count, the opt-in shared memory per block and the run config's `kernels` setting; see
// engine/src/backend/cuda/kernel_policy_select.cpp) and passed to every launcher that has more than one
// kernel for an op. Plain data: no global state, no environment.
#pragma once
#include <cstddef>

namespace deltatune::kernels {

// Hopper: the wgmma + TMA kernels (sm_90a) where an op has them. Portable: the sm_80 kernels (mma.sync,
// cp.async, at most kPortableSmemPerBlock of shared memory per block) on any GPU.
enum class KernelPath { Hopper, Portable };

// The opt-in shared memory per block of sm_86, sm_89 and sm_120 (99 KiB), the least of the supported GPUs
// after sm_80's 163 KiB: every portable kernel fits it.
constexpr size_t kPortableSmemPerBlock = size_t(99) * 1024;

struct KernelPolicy {
  KernelPath path = KernelPath::Portable;
  int cc_major = 8, cc_minor = 0;
  int sm_count = 1;                           // persistent grids
  size_t smem_optin = kPortableSmemPerBlock;  // the device's opt-in shared memory per block (bytes)
  bool hopper() const { return path == KernelPath::Hopper; }
  // FP8 base weights multiply as FP8 through cuBLASLt's 128-block scaling modes, which exist on sm_90 alone
  // (sm_89 has tensor-wide FP8 scaling only, sm_100+ the MX modes): elsewhere, or under the portable policy,
  // they are dequantized to bf16 before the GEMM.
  bool fp8_block_gemm() const { return hopper(); }
  // Whether a kernel asking for `smem` bytes of dynamic shared memory per block may launch on this device.
  bool smem_fits(size_t smem) const { return smem <= smem_optin; }
};

// Whether this binary holds sm_90a code (CMAKE_CUDA_ARCHITECTURES has 90a): the Hopper path needs it; a
// binary built without it (e.g. compute_80 PTX only) runs the portable path on a Hopper too.
bool kernels_built_for_hopper();

}  // namespace deltatune::kernels
