// CPU backend: cross-entropy (fp32, -100 ignored) and the chunked linear cross-entropy of the base class.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

TEST(CpuLoss, CrossEntropyHandComputedWithIgnoredRow) {
  auto be = make_cpu_backend(2);
  Tensor logits = host_tensor({3, 3});
  const float l[9] = {1.f, 2.f, 3.f, 0.f, 0.f, 0.f, 5.f, -5.f, 0.f};
  std::copy(l, l + 9, logits.ptr<float>());
  Tensor labels = i32_tensor({2, -100, 1});
  Tensor d = host_tensor({3, 3});
  const double loss = be->cross_entropy(logits, labels, 0.5f, &d);
  const double z0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double z2 = std::log(std::exp(5.0) + std::exp(-5.0) + 1.0);
  EXPECT_NEAR(loss, (z0 - 3.0) + (z2 + 5.0), 1e-5);
  EXPECT_NEAR(d.ptr<float>()[2], 0.5 * (std::exp(3.0 - z0) - 1.0), 1e-7);
  EXPECT_NEAR(d.ptr<float>()[0], 0.5 * std::exp(1.0 - z0), 1e-7);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(d.ptr<float>()[3 + c], 0.f);  // ignored row
  EXPECT_NEAR(be->cross_entropy(logits, labels, 1.f, nullptr), loss, 1e-12);
  Tensor bad = i32_tensor({3, 0, 0});
  EXPECT_THROW(be->cross_entropy(logits, bad, 1.f, nullptr), Error);
}

TEST(CpuLoss, CrossEntropyGradientFiniteDifferencesAndAliasing) {
  auto be = make_cpu_backend(2);
  Rng rng(71);
  const int64_t T = 10, V = 37;
  Tensor logits = randn_tensor(rng, {T, V}, 2.f);
  Tensor labels = i32_tensor({0, 36, -100, 5, 5, 17, -100, 1, 30, 2});
  const float gs = 0.25f;
  Tensor d = host_tensor({T, V});
  be->cross_entropy(logits, labels, gs, &d);
  auto loss = [&] { return gs * be->cross_entropy(logits, labels, gs, nullptr); };
  const double err = fd_rel_error(logits, d, loss, rng, 120);
  report("cross_entropy dlogits FD rel err", err);
  EXPECT_LT(err, 1e-2);
  Tensor alias = clone(logits);
  be->cross_entropy(alias, labels, gs, &alias);  // dlogits may alias logits
  EXPECT_EQ(max_abs_diff(alias, d), 0.0);
}

TEST(CpuLoss, LinearCrossEntropyChunkedEqualsUnchunked) {
  auto be = make_cpu_backend(2);
  Rng rng(72);
  const int64_t T = 23, H = 16, V = 50;
  Tensor h = randn_tensor(rng, {T, H}), w = randn_tensor(rng, {V, H}, 0.3f);
  std::vector<int32_t> lab;
  for (int64_t t = 0; t < T; ++t) lab.push_back(t % 7 == 3 ? -100 : int32_t(rng.index(V)));
  Tensor labels = i32_tensor(lab);
  // Unchunked: logits = h·Wᵀ, CE, dh = dlogits·W.
  Tensor logits = host_tensor({T, V}), dl = host_tensor({T, V}), dh_ref = host_tensor({T, H});
  be->gemm(h, false, w, true, logits, 1.f, 0.f);
  const double want = be->cross_entropy(logits, labels, 0.1f, &dl);
  be->gemm(dl, false, w, false, dh_ref, 1.f, 0.f);
  for (int64_t chunk : {int64_t(1), int64_t(5), int64_t(23), int64_t(1000)}) {
    Tensor dh = host_tensor({T, H});
    const double got = be->linear_cross_entropy(h, w, labels, 0.1f, &dh, chunk, LossLogits::F32);
    EXPECT_NEAR(got, want, 1e-9 * std::fabs(want)) << chunk;
    EXPECT_LT(max_abs_diff(dh, dh_ref), 1e-6) << chunk;
    EXPECT_NEAR(be->linear_cross_entropy(h, w, labels, 0.1f, nullptr, chunk, LossLogits::F32), want,
                1e-9 * std::fabs(want));
    // bf16 logits asked: the CPU backend, the fp32 reference, computes fp32 logits all the same.
    Tensor dh16 = host_tensor({T, H});
    EXPECT_EQ(be->linear_cross_entropy(h, w, labels, 0.1f, &dh16, chunk, LossLogits::BF16), got) << chunk;
    EXPECT_EQ(max_abs_diff(dh16, dh), 0.0) << chunk;
  }
}

}  // namespace
}  // namespace deltatune
