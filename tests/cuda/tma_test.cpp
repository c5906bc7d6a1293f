// The TMA image tiles the Hopper GDN kernels load (kernels/common/tma.cuh), checked on the GPU element by
// element against the layout formulas their wgmma descriptors assume: 16-byte and 32-byte swizzled column
// blocks, whole rows and a column range, the one-copy maps and the in-order maps (one copy per column block),
// and rows past the tensor's end (zeros).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/kernel_policy.h"
#include "common/tma_check.h"

namespace {

// A compute capability 9.0 GPU and a binary with sm_90a code (a compute_80-PTX-only build has none).
bool hopper() {
  int dev = 0, major = 0, minor = 0;
  return deltatune::kernels::kernels_built_for_hopper() && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
         minor == 0;
}

// An exact bf16 value per (row, head, column): small integers.
float value(int64_t r, int64_t h, int c) {
  return static_cast<float>((r * 7 + h * 13 + c * 3) % 251 - 125);
}

TEST(Tma, ImageTilesMatchTheWgmmaLayouts) {
  if (!hopper()) GTEST_SKIP() << "TMA needs a compute capability 9.0 GPU and sm_90a code";
  const int64_t nrows = 150, heads = 3;
  std::vector<__nv_bfloat16> host(nrows * heads * 128);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int c = 0; c < 128; ++c) host[(r * heads + h) * 128 + c] = __float2bfloat16(value(r, h, c));
  void *src = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(&src, host.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 128 * 128 * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  struct Case {
    int rows, cols, row0, h, col0;
  };
  // Copies the tile of case k through a map over rows of `width` elements (the tensor seen as
  // [nrows][heads·128/width][width]) and counts the elements that differ from value().
  auto check = [&](const Case& k, bool sw32, int width, bool one_box, const std::string& what) {
    const int per = 128 / width;  // map heads per tensor head
    ASSERT_EQ(deltatune::kernels::tma_image_tile_check(src, nrows, heads * per, k.rows, sw32, k.cols, k.row0,
                                                       k.h, k.col0, out, width, one_box),
              cudaSuccess)
        << what;
    std::vector<__nv_bfloat16> got(k.rows * k.cols);
    ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    int wrong = 0;
    for (int r = 0; r < k.rows; ++r)
      for (int c = 0; c < k.cols; ++c) {
        const int64_t row = k.row0 + r;
        const float want = row < nrows ? value(row, k.h / per, width * (k.h % per) + k.col0 + c) : 0.f;
        wrong += __bfloat162float(got[r * k.cols + c]) != want;
      }
    EXPECT_EQ(wrong, 0) << what;
  };
  for (const bool one_box : {true, false}) {
    const std::string boxes = one_box ? "" : ", per block";
    for (bool sw32 : {false, true})
      for (const Case k : {Case{64, 128, 0, 0, 0}, Case{64, 128, 40, 2, 0}, Case{128, 128, 5, 1, 0},
                           Case{64, 64, 17, 1, 64}, Case{64, 128, 120, 0, 0} /* 34 rows past the end */})
        check(k, sw32, 128, one_box,
              std::string(sw32 ? "32-byte swizzled" : "16-byte") + boxes + " rows " + std::to_string(k.row0) +
                  "+" + std::to_string(k.rows) + " head " + std::to_string(k.h) + " columns " +
                  std::to_string(k.col0) + "+" + std::to_string(k.cols));
    // Rows of 64 elements (the chunk matrices' maps): the same tensor as [nrows][2·heads][64].
    for (const Case k : {Case{64, 64, 0, 3, 0}, Case{64, 64, 100, 4, 0} /* 14 rows past the end */})
      check(k, true, 64, one_box,
            std::string("64-wide rows") + boxes + " rows " + std::to_string(k.row0) + " head " +
                std::to_string(k.h));
  }
  cudaFree(src);
  cudaFree(out);
}

}  // namespace
