// CPU backend: NeoX partial RoPE and causal packed attention with GQA.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

TEST(CpuRope, RotateHalfOnFirstRotDimsHandComputed) {
  auto be = make_cpu_backend(2);
  // One token at position 3, one head of 6 dims, rot_dim 4: pairs (0,2) and (1,3); dims 4, 5 untouched.
  const float theta = 100.f;
  Tensor x = host_tensor({1, 1, 6});
  for (int i = 0; i < 6; ++i) x.ptr<float>()[i] = float(i + 1);
  Tensor pos = i32_tensor({3});
  be->rope(x, pos, 4, theta, false);
  const double a0 = 3.0, a1 = 3.0 / std::pow(100.0, 2.0 / 4.0);  // inv_freq = θ^(−2i/rot_dim)
  const float* y = x.ptr<float>();
  EXPECT_NEAR(y[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-5);
  EXPECT_NEAR(y[2], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-5);
  EXPECT_NEAR(y[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-5);
  EXPECT_NEAR(y[3], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-5);
  EXPECT_EQ(y[4], 5.f);
  EXPECT_EQ(y[5], 6.f);
}

TEST(CpuRope, InverseIsTheBackward) {
  // rope is linear and orthogonal: dL/dx of L = Σ r⊙rope(x) is rope⁻¹(r), and rope⁻¹(rope(x)) = x.
  auto be = make_cpu_backend(2);
  Rng rng(51);
  const int64_t T = 9, H = 3, hd = 16;
  Tensor x = randn_tensor(rng, {T, H, hd}), x0 = clone(x), r = randn_tensor(rng, {T, H, hd});
  Tensor pos = i32_tensor({0, 1, 2, 3, 4, 0, 1, 2, 1000});
  be->rope(x, pos, 8, 1e7f, false);
  be->rope(x, pos, 8, 1e7f, true);
  EXPECT_LT(max_abs_diff(x, x0), 1e-5);
  Tensor dx = clone(r);
  be->rope(dx, pos, 8, 1e7f, true);
  Tensor y = host_tensor({T, H, hd});
  auto loss = [&] {
    std::copy(x.ptr<float>(), x.ptr<float>() + x.numel(), y.ptr<float>());
    be->rope(y, pos, 8, 1e7f, false);
    return weighted_sum(r, y);
  };
  const double err = fd_rel_error(x, dx, loss, rng, 80);
  report("rope inverse-as-backward FD rel err", err);
  EXPECT_LT(err, 1e-2);
}

// Naive per-sequence causal attention in double.
void attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cu, float scale,
                   Tensor& o, Tensor& lse) {
  const int64_t hd = q.dim(-1), T = cu.back(), nH = q.numel() / (T * hd), nKV = k.numel() / (T * hd);
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int64_t t = cu[n]; t < cu[n + 1]; ++t)
      for (int64_t h = 0; h < nH; ++h) {
        const int64_t g = h / (nH / nKV);
        std::vector<double> s;
        double m = -1e300;
        for (int64_t j = cu[n]; j <= t; ++j) {
          double d = 0;
          for (int64_t c = 0; c < hd; ++c) d += double(q.ptr<float>()[(t * nH + h) * hd + c]) * k.ptr<float>()[(j * nKV + g) * hd + c];
          s.push_back(d * scale);
          m = std::max(m, s.back());
        }
        double z = 0;
        for (double& e : s) z += std::exp(e - m);
        for (int64_t c = 0; c < hd; ++c) {
          double acc = 0;
          for (int64_t j = cu[n]; j <= t; ++j) acc += std::exp(s[j - cu[n]] - m) / z * v.ptr<float>()[(j * nKV + g) * hd + c];
          o.ptr<float>()[(t * nH + h) * hd + c] = static_cast<float>(acc);
        }
        lse.ptr<float>()[t * nH + h] = static_cast<float>(m + std::log(z));
      }
}

TEST(CpuAttention, ForwardMatchesDoubleReferenceWithPackingAndGqa) {
  auto be = make_cpu_backend(2);
  Rng rng(52);
  SeqLayout seq = make_seq({1, 7, 20});
  const int64_t T = seq.tokens(), nH = 6, nKV = 2, hd = 8;
  Tensor q = randn_tensor(rng, {T, nH, hd}), k = randn_tensor(rng, {T, nKV, hd}), v = randn_tensor(rng, {T, nKV, hd});
  Tensor o = host_tensor({T, nH, hd}), lse = host_tensor({T, nH}), o_ref = host_tensor({T, nH, hd}),
         lse_ref = host_tensor({T, nH});
  const float scale = 1.f / std::sqrt(float(hd));
  be->attention_fwd(q, k, v, seq, scale, o, lse);
  attention_ref(q, k, v, seq.host_cu_seqlens, scale, o_ref, lse_ref);
  const double eo = max_abs_diff(o, o_ref), el = max_abs_diff(lse, lse_ref);
  report("attention o max abs err vs fp64", eo);
  report("attention lse max abs err vs fp64", el);
  EXPECT_LT(eo, 1e-5);
  EXPECT_LT(el, 1e-5);
  // A sequence's first token attends only to itself.
  for (int64_t h = 0; h < nH; ++h)
    for (int64_t c = 0; c < hd; ++c)
      EXPECT_NEAR(o.ptr<float>()[(1 * nH + h) * hd + c], v.ptr<float>()[(1 * nKV + h / 3) * hd + c], 1e-6);
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  auto be = make_cpu_backend(2);
  Rng rng(53);
  SeqLayout seq = make_seq({4, 9, 2});
  const int64_t T = seq.tokens(), nH = 4, nKV = 2, hd = 6;
  Tensor q = randn_tensor(rng, {T, nH, hd}), k = randn_tensor(rng, {T, nKV, hd}), v = randn_tensor(rng, {T, nKV, hd});
  Tensor r = randn_tensor(rng, {T, nH, hd});
  Tensor o = host_tensor({T, nH, hd}), lse = host_tensor({T, nH});
  const float scale = 0.4f;
  be->attention_fwd(q, k, v, seq, scale, o, lse);
  Tensor dq = host_tensor(q.shape), dk = host_tensor(k.shape), dv = host_tensor(v.shape);
  be->attention_bwd(r, q, k, v, o, lse, seq, scale, dq, dk, dv);
  auto loss = [&] {
    be->attention_fwd(q, k, v, seq, scale, o, lse);
    return weighted_sum(r, o);
  };
  const double eq = fd_rel_error(q, dq, loss, rng, 80), ek = fd_rel_error(k, dk, loss, rng, 80),
               ev = fd_rel_error(v, dv, loss, rng, 80);
  report("attention dq FD rel err", eq);
  report("attention dk FD rel err", ek);
  report("attention dv FD rel err", ev);
  EXPECT_LT(eq, 1e-2);
  EXPECT_LT(ek, 1e-2);
  EXPECT_LT(ev, 1e-2);
}

TEST(CpuAttention, NothingLeaksBetweenSequences) {
  auto be = make_cpu_backend(2);
  Rng rng(54);
  SeqLayout seq = make_seq({5, 6});
  const int64_t nH = 2, nKV = 1, hd = 4;
  Tensor q = randn_tensor(rng, {11, nH, hd}), k = randn_tensor(rng, {11, nKV, hd}), v = randn_tensor(rng, {11, nKV, hd});
  Tensor o1 = host_tensor(q.shape), o2 = host_tensor(q.shape), lse = host_tensor({11, nH});
  be->attention_fwd(q, k, v, seq, 0.5f, o1, lse);
  for (Tensor* t : {&q, &k, &v})
    for (int64_t i = 0; i < 5 * (t->numel() / 11); ++i) t->ptr<float>()[i] += 1.f;
  be->attention_fwd(q, k, v, seq, 0.5f, o2, lse);
  for (int64_t i = 5 * nH * hd; i < 11 * nH * hd; ++i) EXPECT_EQ(o1.ptr<float>()[i], o2.ptr<float>()[i]);
  EXPECT_GT(max_abs_diff(o1.slice(0, 5), o2.slice(0, 5)), 0.0);
  // Gradient only on sequence 1: no gradient reaches sequence 0's q, k, v.
  Tensor dout = randn_tensor(rng, q.shape);
  for (int64_t i = 0; i < 5 * nH * hd; ++i) dout.ptr<float>()[i] = 0.f;
  Tensor dq = host_tensor(q.shape), dk = host_tensor(k.shape), dv = host_tensor(v.shape);
  be->attention_bwd(dout, q, k, v, o2, lse, seq, 0.5f, dq, dk, dv);
  EXPECT_EQ(max_abs(dq.slice(0, 5)), 0.0);
  EXPECT_EQ(max_abs(dk.slice(0, 5)), 0.0);
  EXPECT_EQ(max_abs(dv.slice(0, 5)), 0.0);
}

}  // namespace
}  // namespace deltatune
