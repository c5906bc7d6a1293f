#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"

namespace deltatune {

TEST(Tensor, ViewSliceIndexShareMemory) {
  Tensor t = host_tensor({3, 4});
  for (int i = 0; i < 12; ++i) t.ptr<float>()[i] = float(i);
  Tensor row = t.index(1);
  EXPECT_EQ(row.shape, (Shape{4}));
  EXPECT_EQ(row.ptr<float>()[0], 4.f);
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.numel(), 8);
  EXPECT_EQ(t.view({12}).dim(0), 12);
  EXPECT_THROW(t.view({5}), Error);
}

TEST(DType, Bf16RoundTripRoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), f32_to_bf16(1.0f));  // tie -> even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.5f)), 0.5f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.f)), 65504.f);
}

TEST(Tensor, ConvertBf16) {
  Tensor t = host_tensor({2});
  t.ptr<float>()[0] = 3.140625f;
  t.ptr<float>()[1] = -2.f;
  auto back = host_to_f32(host_convert(t, DType::BF16));
  EXPECT_EQ(back[0], 3.140625f);
  EXPECT_EQ(back[1], -2.f);
}

}  // namespace deltatune
