// The layout rules the wgmma kernels rely on (kernels/common/wgmma.cuh), checked on the GPU: a wrong
// descriptor stride, transpose flag or accumulator mapping shows up here before it shows up as a wrong GDN
// scan.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "common/kernel_policy.h"
#include "common/wgmma_check.h"

namespace {

// A compute capability 9.0 GPU and a binary with sm_90a code (a compute_80-PTX-only build has none).
bool hopper() {
  int dev = 0, major = 0, minor = 0;
  return deltatune::kernels::kernels_built_for_hopper() && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
         minor == 0;
}

TEST(Wgmma, CoreLayoutProductsAndTransposedStores) {
  if (!hopper()) GTEST_SKIP() << "wgmma needs a compute capability 9.0 GPU and sm_90a code";
  for (bool a_mn : {false, true})
    for (bool b_mn : {false, true}) {
      double err = -1, err_t = -1;
      ASSERT_EQ(deltatune::kernels::wgmma_check_m64n64(a_mn, b_mn, &err, &err_t), cudaSuccess);
      const std::string what =
          std::string(a_mn ? "A MN-major" : "A K-major") + (b_mn ? ", B MN-major" : ", B K-major");
      // The operands and every partial sum are exact in bf16 / fp32: any layout mistake is a large error.
      EXPECT_EQ(err, 0.0) << what << ": accumulators";
      EXPECT_EQ(err_t, 0.0) << what << ": stmatrix.trans into a core-layout tile";
    }
}

}  // namespace
