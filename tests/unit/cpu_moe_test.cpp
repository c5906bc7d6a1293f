// CPU backend: MoE router (softmax → top-k → renormalise) and the row movement ops around the experts.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

TEST(CpuMoe, RouterTopKRenormalisedWithLowerIndexTieBreak) {
  auto be = make_cpu_backend(2);
  Tensor logits = host_tensor({2, 4});
  const float l[8] = {1.f, 3.f, 3.f, 0.f, 0.1f, 2.f, -1.f, 1.5f};
  std::copy(l, l + 8, logits.ptr<float>());
  Tensor idx = host_tensor({2, 2}, DType::I32), w = host_tensor({2, 2});
  be->moe_router_fwd(logits, 2, idx, w);
  EXPECT_EQ(idx.ptr<int32_t>()[0], 1);  // tie between experts 1 and 2: lower index first
  EXPECT_EQ(idx.ptr<int32_t>()[1], 2);
  EXPECT_NEAR(w.ptr<float>()[0], 0.5f, 1e-7);
  EXPECT_NEAR(w.ptr<float>()[1], 0.5f, 1e-7);
  EXPECT_EQ(idx.ptr<int32_t>()[2], 1);
  EXPECT_EQ(idx.ptr<int32_t>()[3], 3);
  // Renormalised top-k = softmax over the selected logits only.
  const double z = std::exp(2.0) + std::exp(1.5);
  EXPECT_NEAR(w.ptr<float>()[2], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w.ptr<float>()[3], std::exp(1.5) / z, 1e-6);
  EXPECT_THROW(be->moe_router_fwd(logits, 5, idx, w), Error);
}

TEST(CpuMoe, RouterBackwardMatchesFiniteDifferences) {
  auto be = make_cpu_backend(2);
  Rng rng(61);
  const int64_t T = 12, E = 8, k = 3;
  // Logits spaced ≥ 0.1 apart per row so ±1e-3 steps never change the selection.
  Tensor logits = host_tensor({T, E});
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int> perm(E);
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    for (int e = 0; e < E; ++e) logits.ptr<float>()[t * E + e] = 0.3f * perm[e] + rng.uniform(0.f, 0.05f);
  }
  Tensor idx = host_tensor({T, k}, DType::I32), w = host_tensor({T, k}), r = randn_tensor(rng, {T, k});
  be->moe_router_fwd(logits, k, idx, w);
  Tensor dlogits = host_tensor({T, E});
  be->moe_router_bwd(r, idx, w, dlogits);
  auto loss = [&] {
    be->moe_router_fwd(logits, k, idx, w);
    return weighted_sum(r, w);
  };
  const double err = fd_rel_error(logits, dlogits, loss, rng, 96);
  report("moe_router dlogits FD rel err", err);
  EXPECT_LT(err, 1e-2);
}

TEST(CpuMoe, GatherAndScatterAreAdjoint) {
  auto be = make_cpu_backend(2);
  Rng rng(62);
  const int64_t T = 7, H = 130, n = 9;
  Tensor src = randn_tensor(rng, {T, H});
  Tensor rows = i32_tensor({3, 0, 6, 3, 3, 1, 6, 2, 5});  // repeats on purpose
  Tensor g = host_tensor({n, H});
  be->gather_rows(src, rows, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < H; ++c) EXPECT_EQ(g.ptr<float>()[i * H + c], src.ptr<float>()[rows.ptr<int32_t>()[i] * H + c]);
  // <gather(x), y> = <x, scatter(y)>
  Tensor y = randn_tensor(rng, {n, H}), sx = host_tensor({T, H});
  be->scatter_add_rows(y, rows, Tensor{}, sx);
  EXPECT_NEAR(weighted_sum(g, y), weighted_sum(src, sx), 1e-3);
  // Scaled scatter accumulates: dst[rows[i]] += s[i]·src[i].
  Tensor s = randn_tensor(rng, {n}), acc = randn_tensor(rng, {T, H}), want = clone(acc);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < H; ++c)
      want.ptr<float>()[rows.ptr<int32_t>()[i] * H + c] += s.ptr<float>()[i] * y.ptr<float>()[i * H + c];
  be->scatter_add_rows(y, rows, s, acc);
  EXPECT_LT(max_abs_diff(acc, want), 1e-5);
  Tensor bad = i32_tensor({7});
  Tensor g1 = host_tensor({1, H});
  EXPECT_THROW(be->gather_rows(src, bad, g1), Error);
}

TEST(CpuMoe, ScaleRowsGradientIsRowDot) {
  auto be = make_cpu_backend(2);
  Rng rng(63);
  const int64_t R = 6, C = 11;
  Tensor x = randn_tensor(rng, {R, C}), s = randn_tensor(rng, {R}), r = randn_tensor(rng, {R, C}), y = host_tensor({R, C});
  be->scale_rows(x, s, y);
  for (int64_t i = 0; i < R * C; ++i) EXPECT_EQ(y.ptr<float>()[i], x.ptr<float>()[i] * s.ptr<float>()[i / C]);
  Tensor ds = host_tensor({R}), dx = host_tensor({R, C});
  be->row_dot(r, x, ds);  // dL/ds_i = Σ_c r_ic x_ic
  be->scale_rows(r, s, dx);  // dL/dx = r·s
  auto loss = [&] {
    be->scale_rows(x, s, y);
    return weighted_sum(r, y);
  };
  const double es = fd_rel_error(s, ds, loss, rng), ex = fd_rel_error(x, dx, loss, rng);
  report("scale_rows ds (row_dot) FD rel err", es);
  report("scale_rows dx FD rel err", ex);
  EXPECT_LT(es, 1e-2);
  EXPECT_LT(ex, 1e-2);
}

}  // namespace
}  // namespace deltatune
