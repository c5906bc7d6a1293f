// CPU backend: RMSNorm variants and elementwise activations, forward by hand and backward by finite
// differences of L = Σ r⊙y.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

TEST(CpuNorm, RmsNormHandComputed) {
  auto be = make_cpu_backend(2);
  // Row [3, 4]: mean(x²) = 12.5, r = 1/sqrt(12.5 + eps).
  Tensor x = host_tensor({1, 2}), w = host_tensor({2}), y = host_tensor({1, 2}), rstd = host_tensor({1});
  x.ptr<float>()[0] = 3.f;
  x.ptr<float>()[1] = 4.f;
  w.ptr<float>()[0] = 0.5f;
  w.ptr<float>()[1] = -0.25f;
  const float eps = 1e-6f;
  const double r = 1.0 / std::sqrt(12.5 + eps);
  be->rmsnorm_fwd(x, w, eps, true, y, rstd);  // zero-centred: (1 + w)
  EXPECT_NEAR(rstd.ptr<float>()[0], r, 1e-7);
  EXPECT_NEAR(y.ptr<float>()[0], 3 * r * 1.5, 1e-6);
  EXPECT_NEAR(y.ptr<float>()[1], 4 * r * 0.75, 1e-6);
  be->rmsnorm_fwd(x, w, eps, false, y, rstd);  // plain w
  EXPECT_NEAR(y.ptr<float>()[0], 3 * r * 0.5, 1e-6);
  EXPECT_NEAR(y.ptr<float>()[1], 4 * r * -0.25, 1e-6);
}

TEST(CpuNorm, RmsNormBackwardBothVariants) {
  auto be = make_cpu_backend(2);
  Rng rng(41);
  const int64_t rows = 9, n = 24;
  for (bool zc : {true, false}) {
    Tensor x = randn_tensor(rng, {rows, n}), w = randn_tensor(rng, {n}, 0.5f), r = randn_tensor(rng, {rows, n});
    Tensor y = host_tensor({rows, n}), rstd = host_tensor({rows}), dx = host_tensor({rows, n});
    be->rmsnorm_fwd(x, w, 1e-6f, zc, y, rstd);
    be->rmsnorm_bwd(r, x, w, rstd, zc, dx);
    auto loss = [&] {
      be->rmsnorm_fwd(x, w, 1e-6f, zc, y, rstd);
      return weighted_sum(r, y);
    };
    const double err = fd_rel_error(x, dx, loss, rng, 80);
    report(zc ? "rmsnorm (zero-centred) dx FD rel err" : "rmsnorm (plain) dx FD rel err", err);
    EXPECT_LT(err, 1e-2);
  }
}

TEST(CpuNorm, GatedRmsNormForwardAndBackward) {
  auto be = make_cpu_backend(2);
  Rng rng(42);
  const int64_t rows = 8, n = 16;
  Tensor x = randn_tensor(rng, {rows, n}), z = randn_tensor(rng, {rows, n}, 2.f), w = randn_tensor(rng, {n});
  Tensor y = host_tensor({rows, n}), rstd = host_tensor({rows});
  be->gated_rmsnorm_fwd(x, z, w, 1e-6f, y, rstd);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < n; ++c) ss += double(x.ptr<float>()[i * n + c]) * x.ptr<float>()[i * n + c];
    const double r = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t c = 0; c < n; ++c) {
      const double zz = z.ptr<float>()[i * n + c];
      const double want = x.ptr<float>()[i * n + c] * r * w.ptr<float>()[c] * zz / (1 + std::exp(-zz));
      EXPECT_NEAR(y.ptr<float>()[i * n + c], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
  Tensor r = randn_tensor(rng, {rows, n}), dx = host_tensor({rows, n}), dz = host_tensor({rows, n});
  be->gated_rmsnorm_bwd(r, x, z, w, rstd, dx, dz);
  auto loss = [&] {
    be->gated_rmsnorm_fwd(x, z, w, 1e-6f, y, rstd);
    return weighted_sum(r, y);
  };
  const double ex = fd_rel_error(x, dx, loss, rng, 80), ez = fd_rel_error(z, dz, loss, rng, 80);
  report("gated_rmsnorm dx FD rel err", ex);
  report("gated_rmsnorm dz FD rel err", ez);
  EXPECT_LT(ex, 1e-2);
  EXPECT_LT(ez, 1e-2);
}

TEST(CpuActivation, SwigluForwardAndBackward) {
  auto be = make_cpu_backend(2);
  Rng rng(43);
  Tensor gate = randn_tensor(rng, {6, 10}, 2.f), up = randn_tensor(rng, {6, 10}), out = host_tensor({6, 10});
  be->swiglu_fwd(gate, up, out);
  for (int64_t i = 0; i < 60; ++i) {
    const double g = gate.ptr<float>()[i];
    EXPECT_NEAR(out.ptr<float>()[i], g / (1 + std::exp(-g)) * up.ptr<float>()[i], 1e-6);
  }
  Tensor r = randn_tensor(rng, {6, 10}), dg = host_tensor({6, 10}), du = host_tensor({6, 10});
  be->swiglu_bwd(r, gate, up, dg, du);
  auto loss = [&] {
    be->swiglu_fwd(gate, up, out);
    return weighted_sum(r, out);
  };
  const double eg = fd_rel_error(gate, dg, loss, rng, 60), eu = fd_rel_error(up, du, loss, rng, 60);
  report("swiglu dgate FD rel err", eg);
  report("swiglu dup FD rel err", eu);
  EXPECT_LT(eg, 1e-2);
  EXPECT_LT(eu, 1e-2);
}

TEST(CpuActivation, SigmoidMulForwardAndBackward) {
  auto be = make_cpu_backend(2);
  Rng rng(44);
  Tensor x = randn_tensor(rng, {5, 12}), gate = randn_tensor(rng, {5, 12}, 2.f), out = host_tensor({5, 12});
  be->sigmoid_mul_fwd(x, gate, out);
  Tensor s = host_tensor({5, 12});
  be->sigmoid(gate, s);
  for (int64_t i = 0; i < 60; ++i) {
    const double sg = 1.0 / (1 + std::exp(-double(gate.ptr<float>()[i])));
    EXPECT_NEAR(s.ptr<float>()[i], sg, 1e-7);
    EXPECT_NEAR(out.ptr<float>()[i], x.ptr<float>()[i] * sg, 1e-6);
  }
  Tensor r = randn_tensor(rng, {5, 12}), dx = host_tensor({5, 12}), dg = host_tensor({5, 12});
  be->sigmoid_mul_bwd(r, x, gate, dx, dg);
  auto loss = [&] {
    be->sigmoid_mul_fwd(x, gate, out);
    return weighted_sum(r, out);
  };
  const double ex = fd_rel_error(x, dx, loss, rng, 60), eg = fd_rel_error(gate, dg, loss, rng, 60);
  report("sigmoid_mul dx FD rel err", ex);
  report("sigmoid_mul dgate FD rel err", eg);
  EXPECT_LT(ex, 1e-2);
  EXPECT_LT(eg, 1e-2);
}

}  // namespace
}  // namespace deltatune
