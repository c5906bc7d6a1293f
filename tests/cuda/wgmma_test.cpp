// The layout rules the wgmma kernels rely on (kernels/common/wgmma.cuh), checked on the GPU: a wrong
// descriptor stride, transpose flag or accumulator mapping shows up here before it shows up as a wrong GDN
// scan.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "common/wgmma_check.h"

namespace {

bool hopper() {
  int dev = 0, major = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9;
}

TEST(Wgmma, CoreLayoutProductsAndTransposedStores) {
  if (!hopper()) GTEST_SKIP() << "wgmma needs a compute capability 9 GPU";
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
