// Gated DeltaNet on the CPU backend: depthwise conv + SiLU, gates, and the chunked delta rule against
// the naive recurrence (spec §4.1) and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gdn_reference.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

// ---- conv1d + SiLU -----------------------------------------------------------------------------

float silu(float x) { return x / (1.f + std::exp(-x)); }

TEST(CpuConv, HandComputedWithResetAtSequenceStart) {
  auto be = make_cpu_backend(2);
  // One channel, K = 4, sequences of 3 and 2 tokens.
  Tensor x = host_tensor({5, 1}), w = host_tensor({1, 4}), y = host_tensor({5, 1});
  const float xs[5] = {1, 2, 3, 4, 5}, ws[4] = {0.1f, -0.2f, 0.3f, 0.5f};
  std::copy(xs, xs + 5, x.ptr<float>());
  std::copy(ws, ws + 4, w.ptr<float>());
  SeqLayout seq = make_seq({3, 2});
  be->conv1d_silu_fwd(x, w, seq, y);
  // Tap j = K−1 = 3 multiplies the current token; earlier taps reach back, but not past the start.
  const float want[5] = {silu(0.5f * 1), silu(0.5f * 2 + 0.3f * 1), silu(0.5f * 3 + 0.3f * 2 - 0.2f * 1),
                         silu(0.5f * 4), silu(0.5f * 5 + 0.3f * 4)};
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(y.ptr<float>()[t], want[t], 1e-6) << t;
}

TEST(CpuConv, BackwardMatchesFiniteDifferencesWithResets) {
  auto be = make_cpu_backend(2);
  Rng rng(11);
  SeqLayout seq = make_seq({5, 2, 9, 1});
  const int64_t T = seq.tokens(), C = 6, K = 4;
  Tensor x = randn_tensor(rng, {T, C}), w = randn_tensor(rng, {C, K}, 0.5f), r = randn_tensor(rng, {T, C});
  Tensor y = host_tensor({T, C}), dx = host_tensor({T, C});
  be->conv1d_silu_bwd(r, x, w, seq, dx);
  auto loss = [&] {
    be->conv1d_silu_fwd(x, w, seq, y);
    return weighted_sum(r, y);
  };
  const double err = fd_rel_error(x, dx, loss, rng, 1000);
  report("conv1d_silu dx FD rel err", err);
  EXPECT_LT(err, 1e-2);
}

TEST(CpuConv, NothingLeaksBetweenSequences) {
  auto be = make_cpu_backend(2);
  Rng rng(12);
  SeqLayout seq = make_seq({7, 6});
  const int64_t C = 5;
  Tensor x = randn_tensor(rng, {13, C}), w = randn_tensor(rng, {C, 4}), y1 = host_tensor({13, C}),
         y2 = host_tensor({13, C});
  be->conv1d_silu_fwd(x, w, seq, y1);
  for (int64_t i = 0; i < 7 * C; ++i) x.ptr<float>()[i] += 3.f;  // change all of sequence 0
  be->conv1d_silu_fwd(x, w, seq, y2);
  for (int64_t i = 7 * C; i < 13 * C; ++i) EXPECT_EQ(y1.ptr<float>()[i], y2.ptr<float>()[i]);
  // Backward: a gradient on sequence 1 only gives no gradient on sequence 0.
  Tensor dy = randn_tensor(rng, {13, C}), dx = host_tensor({13, C});
  for (int64_t i = 0; i < 7 * C; ++i) dy.ptr<float>()[i] = 0.f;
  be->conv1d_silu_bwd(dy, x, w, seq, dx);
  for (int64_t i = 0; i < 7 * C; ++i) EXPECT_EQ(dx.ptr<float>()[i], 0.f);
}

// The conv with its output / incoming gradient as column parts (the GDN layer's q | k | v): the same values
// as one [T, C] tensor, and parts that do not cover the channels are refused by name.
TEST(CpuConv, ColumnPartsMatchOneTensorAndBadPartsAreRefused) {
  auto be = make_cpu_backend(2);
  Rng rng(14);
  SeqLayout seq = make_seq({5, 8, 1});
  const int64_t T = seq.tokens(), C = 7;
  Tensor x = randn_tensor(rng, {T, C}), w = randn_tensor(rng, {C, 4}), dy = randn_tensor(rng, {T, C});
  Tensor y = host_tensor({T, C}), dx = host_tensor({T, C});
  be->conv1d_silu_fwd(x, w, seq, y);
  be->conv1d_silu_bwd(dy, x, w, seq, dx);
  const int64_t widths[3] = {2, 4, 1};
  std::vector<Tensor> parts, dparts;
  for (int64_t wd : widths) parts.push_back(host_tensor({T, wd})), dparts.push_back(host_tensor({T, wd}));
  std::vector<Tensor*> ys;
  std::vector<const Tensor*> dys;
  for (int i = 0; i < 3; ++i) ys.push_back(&parts[i]), dys.push_back(&dparts[i]);
  be->conv1d_silu_fwd_split(x, w, seq, ys);
  for (int64_t t = 0, c0 = 0; t < T; ++t, c0 = 0)
    for (int i = 0; i < 3; c0 += widths[i++])
      for (int64_t c = 0; c < widths[i]; ++c) {
        EXPECT_EQ(parts[i].ptr<float>()[t * widths[i] + c], y.ptr<float>()[t * C + c0 + c]) << t << " " << c0 + c;
        dparts[i].ptr<float>()[t * widths[i] + c] = dy.ptr<float>()[t * C + c0 + c];
      }
  Tensor dx2 = host_tensor({T, C});
  be->conv1d_silu_bwd_split(dys, x, w, seq, dx2);
  for (int64_t i = 0; i < T * C; ++i) EXPECT_EQ(dx2.ptr<float>()[i], dx.ptr<float>()[i]) << i;

  Tensor short_part = host_tensor({T, 3});
  std::vector<Tensor*> bad = {&parts[0], &short_part};  // 5 of the 7 channels
  try {
    be->conv1d_silu_fwd_split(x, w, seq, bad);
    ADD_FAILURE() << "parts covering 5 of 7 channels were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("conv1d_silu_fwd_split"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("7 channels"), std::string::npos) << e.what();
  }
}

// ---- gates -------------------------------------------------------------------------------------

TEST(CpuGdnGates, HandComputedAndFiniteDifferences) {
  auto be = make_cpu_backend(2);
  Rng rng(13);
  const int64_t T = 7, HV = 3;
  Tensor a = randn_tensor(rng, {T, HV}, 2.f), b = randn_tensor(rng, {T, HV}, 2.f);
  Tensor A_log = rand_tensor(rng, {HV}, -1.f, 2.f), dt = randn_tensor(rng, {HV});
  a.ptr<float>()[0] = 0.f;
  b.ptr<float>()[0] = 0.f;
  A_log.ptr<float>()[0] = 0.f;
  dt.ptr<float>()[0] = 0.f;
  a.ptr<float>()[3] = 25.f;  // softplus threshold: linear above 20 (torch semantics)
  Tensor g = host_tensor({T, HV}), beta = host_tensor({T, HV});
  be->gdn_gates_fwd(a, b, A_log, dt, g, beta);
  EXPECT_NEAR(g.ptr<float>()[0], -std::log(2.f), 1e-7);
  EXPECT_NEAR(beta.ptr<float>()[0], 0.5f, 1e-7);
  EXPECT_NEAR(g.ptr<float>()[3], -std::exp(0.f) * (25.f + dt.ptr<float>()[0]), 1e-5);
  for (int64_t i = 0; i < T * HV; ++i) {
    const int64_t h = i % HV;
    const double sp = std::log1p(std::exp(double(a.ptr<float>()[i]) + dt.ptr<float>()[h]));
    EXPECT_NEAR(g.ptr<float>()[i], -std::exp(double(A_log.ptr<float>()[h])) * sp, 1e-5 * (1 + std::fabs(sp)));
  }
  Tensor rg = randn_tensor(rng, {T, HV}), rb = randn_tensor(rng, {T, HV}), da = host_tensor({T, HV}),
         db = host_tensor({T, HV});
  be->gdn_gates_bwd(rg, rb, a, b, A_log, dt, da, db);
  auto loss = [&] {
    be->gdn_gates_fwd(a, b, A_log, dt, g, beta);
    return weighted_sum(rg, g) + weighted_sum(rb, beta);
  };
  const double ea = fd_rel_error(a, da, loss, rng, 100), eb = fd_rel_error(b, db, loss, rng, 100);
  report("gdn_gates da FD rel err", ea);
  report("gdn_gates db FD rel err", eb);
  EXPECT_LT(ea, 1e-2);
  EXPECT_LT(eb, 1e-2);
}

// ---- the delta rule core -----------------------------------------------------------------------

struct GdnCase {
  std::vector<int32_t> lengths;
  int64_t HK, HV, dk, dv;
  float g_lo, g_hi;        // g ~ U(g_lo, g_hi)
  float beta_lo, beta_hi;  // β ~ U(beta_lo, beta_hi)
};

struct GdnInputs {
  SeqLayout seq;
  Tensor q, k, v, g, beta;
  float scale;
};

GdnInputs make_inputs(const GdnCase& c, Rng& rng) {
  GdnInputs in;
  in.seq = make_seq(c.lengths);
  const int64_t T = in.seq.tokens();
  in.q = randn_tensor(rng, {T, c.HK, c.dk});
  in.k = randn_tensor(rng, {T, c.HK, c.dk});
  in.v = randn_tensor(rng, {T, c.HV, c.dv});
  in.g = rand_tensor(rng, {T, c.HV}, c.g_lo, c.g_hi);
  in.beta = rand_tensor(rng, {T, c.HV}, c.beta_lo, c.beta_hi);
  in.scale = 1.f / std::sqrt(float(c.dk));
  return in;
}

TEST(CpuGdn, ChunkedForwardMatchesNaiveRecurrence) {
  // Both sides are fp32 with O(1) values (unit keys, β ≤ 1, |v| ~ 1, decays ≤ 1). They differ only in
  // summation order and in the chunked path's triangular solve (T = (I + A)⁻¹ over ≤ 64 rows), each
  // contributing a few ulps (≈1e-7) per term over ~dk + C terms; 1e-4 leaves a wide margin while still
  // catching any formula error, which shows up at O(1e-2) or more.
  auto be = make_cpu_backend(2);
  Rng rng(21);
  const std::vector<GdnCase> cases = {
      {{1}, 1, 1, 8, 8, -1.f, 0.f, 0.f, 1.f},
      {{5}, 2, 2, 16, 8, -1.f, 0.f, 0.f, 1.f},
      {{63}, 1, 2, 16, 12, -1.f, 0.f, 0.f, 1.f},
      {{64}, 2, 6, 8, 16, -1.f, 0.f, 0.f, 1.f},
      {{65}, 1, 3, 12, 8, -1.f, 0.f, 0.f, 1.f},
      {{130}, 2, 8, 16, 16, -0.5f, 0.f, 0.f, 1.f},
      {{70, 10, 64, 3, 129}, 2, 4, 8, 12, -1.f, 0.f, 0.f, 1.f},  // packed, incl. sequences shorter than a chunk
      {{100, 40}, 1, 1, 32, 24, -20.f, -5.f, 0.f, 1.f},          // strongly negative g: e^g underflows in a chunk
      {{130}, 2, 4, 16, 8, -0.05f, 0.f, 0.999f, 1.f},            // β ≈ 1, little decay
      {{130}, 1, 3, 16, 8, -1.f, 0.f, 0.f, 1e-4f},                // β ≈ 0
  };
  double worst32 = 0, worst64 = 0, worst_rel = 0;
  for (const auto& c : cases) {
    GdnInputs in = make_inputs(c, rng);
    Tensor o = host_tensor(in.v.shape), o32 = host_tensor(in.v.shape), o64 = host_tensor(in.v.shape);
    be->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o);
    gdn_recurrent_reference(in.q, in.k, in.v, in.g, in.beta, in.seq.host_cu_seqlens, in.scale, o32, false);
    gdn_recurrent_reference(in.q, in.k, in.v, in.g, in.beta, in.seq.host_cu_seqlens, in.scale, o64, true);
    const double e32 = max_abs_diff(o, o32), e64 = max_abs_diff(o, o64), rel = e64 / max_abs(o64);
    EXPECT_LT(e32, 1e-4) << "T=" << in.seq.tokens() << " HK=" << c.HK << " HV=" << c.HV;
    EXPECT_LT(e64, 1e-4) << "T=" << in.seq.tokens() << " HK=" << c.HK << " HV=" << c.HV;
    // Relative too, so the β ≈ 0 case (outputs ~1e-4) is not a comparison of two near-zero tensors.
    EXPECT_LT(rel, 1e-4) << "T=" << in.seq.tokens() << " HK=" << c.HK << " HV=" << c.HV;
    worst32 = std::max(worst32, e32);
    worst64 = std::max(worst64, e64);
    worst_rel = std::max(worst_rel, rel);
  }
  report("gdn chunked vs naive fp32 max abs diff", worst32);
  report("gdn chunked vs naive fp64 max abs diff", worst64);
  report("gdn chunked vs naive fp64 max rel diff", worst_rel);
}

// dL/d(each input) from the chunked backward vs central differences of L = Σ r⊙o, with o from (a) the
// fp64 naive recurrence (an independent forward, FD error ~eps²) and (b) the chunked fp32 forward.
void check_gdn_backward(const GdnCase& c, uint64_t seed, double tol_fp64, double tol_fp32, const char* label) {
  auto be = make_cpu_backend(2);
  Rng rng(seed);
  GdnInputs in = make_inputs(c, rng);
  Tensor r = randn_tensor(rng, in.v.shape);
  Tensor dq = host_tensor(in.q.shape), dk = host_tensor(in.k.shape), dv = host_tensor(in.v.shape),
         dg = host_tensor(in.g.shape), db = host_tensor(in.beta.shape), o = host_tensor(in.v.shape);
  be->gdn_bwd(r, in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, dq, dk, dv, dg, db);
  auto loss64 = [&] {
    gdn_recurrent_reference(in.q, in.k, in.v, in.g, in.beta, in.seq.host_cu_seqlens, in.scale, o, true);
    return weighted_sum(r, o);
  };
  auto loss32 = [&] {
    be->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o);
    return weighted_sum(r, o);
  };
  struct Item {
    const char* name;
    Tensor* x;
    Tensor* grad;
  } items[] = {{"dq", &in.q, &dq}, {"dk", &in.k, &dk}, {"dv", &in.v, &dv}, {"dg", &in.g, &dg}, {"dbeta", &in.beta, &db}};
  for (auto& it : items) {
    const double e64 = fd_rel_error(*it.x, *it.grad, loss64, rng, 60);
    const double e32 = fd_rel_error(*it.x, *it.grad, loss32, rng, 30);
    report((std::string("gdn ") + label + " " + it.name + " FD(fp64 naive) rel").c_str(), e64);
    report((std::string("gdn ") + label + " " + it.name + " FD(fp32 chunked) rel").c_str(), e32);
    EXPECT_LT(e64, tol_fp64) << it.name;
    EXPECT_LT(e32, tol_fp32) << it.name;
  }
}

TEST(CpuGdn, BackwardMatchesFiniteDifferencesAcrossChunksAndSequences) {
  // Two sequences, the second crossing a chunk boundary with a partial last chunk; GVA r = 2, dk ≠ dv.
  check_gdn_backward({{5, 70}, 2, 4, 8, 6, -1.f, 0.f, 0.f, 1.f}, 31, 2e-3, 1e-2, "packed r=2");
}

TEST(CpuGdn, BackwardGvaR3StrongDecayBetaNearOne) {
  check_gdn_backward({{67}, 1, 3, 6, 5, -6.f, -0.5f, 0.95f, 1.f}, 32, 2e-3, 1e-2, "r=3 strong decay");
}

TEST(CpuGdn, BackwardGvaR4AndR1) {
  check_gdn_backward({{3, 64, 1}, 1, 4, 4, 3, -1.f, 0.f, 0.f, 1.f}, 35, 2e-3, 1e-2, "r=4");
  check_gdn_backward({{66}, 2, 2, 5, 7, -2.f, 0.f, 0.f, 1.f}, 36, 2e-3, 1e-2, "r=1");
}

TEST(CpuGdn, NothingLeaksBetweenSequences) {
  auto be = make_cpu_backend(2);
  Rng rng(33);
  GdnInputs in = make_inputs({{40, 30}, 1, 2, 8, 8, -1.f, 0.f, 0.f, 1.f}, rng);
  Tensor o1 = host_tensor(in.v.shape), o2 = host_tensor(in.v.shape);
  be->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o1);
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
    const int64_t per_token = t->numel() / 70;
    for (int64_t i = 0; i < 40 * per_token; ++i) t->ptr<float>()[i] *= 0.5f;
  }
  be->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o2);
  const int64_t row = 2 * 8;
  for (int64_t i = 0; i < 40 * row; ++i) ASSERT_NE(o1.ptr<float>()[i], o2.ptr<float>()[i]) << "sequence 0 did change";
  for (int64_t i = 40 * row; i < 70 * row; ++i) EXPECT_EQ(o1.ptr<float>()[i], o2.ptr<float>()[i]);
  // A gradient on sequence 1 only gives zero gradients on sequence 0.
  Tensor dout = randn_tensor(rng, in.v.shape);
  for (int64_t i = 0; i < 40 * row; ++i) dout.ptr<float>()[i] = 0.f;
  Tensor dq = host_tensor(in.q.shape), dk = host_tensor(in.k.shape), dv = host_tensor(in.v.shape),
         dg = host_tensor(in.g.shape), db = host_tensor(in.beta.shape);
  be->gdn_bwd(dout, in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, dq, dk, dv, dg, db);
  EXPECT_EQ(max_abs(dq.slice(0, 40)), 0.0);
  EXPECT_EQ(max_abs(dk.slice(0, 40)), 0.0);
  EXPECT_EQ(max_abs(dv.slice(0, 40)), 0.0);
  EXPECT_EQ(max_abs(dg.slice(0, 40)), 0.0);
  EXPECT_EQ(max_abs(db.slice(0, 40)), 0.0);
  EXPECT_GT(max_abs(dv.slice(40, 70)), 0.0);
}

// The op fed the gate inputs (Backend::gdn_gated_fwd/bwd): da, db by finite differences through the gates
// and the delta rule, packed sequences, GVA 2; every keep mode gives the same output.
TEST(CpuGdn, GatedOpGradientsThroughTheGateInputs) {
  auto be = make_cpu_backend(2);
  Rng rng(37);
  GdnInputs in = make_inputs({{9, 70}, 1, 2, 6, 5, -1.f, 0.f, 0.f, 1.f}, rng);
  const int64_t T = in.seq.tokens(), HV = 2;
  Tensor a = randn_tensor(rng, {T, HV}, 2.f), b = randn_tensor(rng, {T, HV}, 2.f);
  Tensor A_log = rand_tensor(rng, {HV}, -1.f, 1.f), dt = randn_tensor(rng, {HV});
  const Backend::GdnGateInputs gates{a, b, A_log, dt};
  Tensor r = randn_tensor(rng, in.v.shape), o = host_tensor(in.v.shape), o2 = host_tensor(in.v.shape);
  for (auto keep : {std::optional<Backend::GdnKeep>{}, std::optional{Backend::GdnKeep::All},
                    std::optional{Backend::GdnKeep::States}}) {
    be->gdn_gated_fwd(in.q, in.k, in.v, gates, in.seq, in.scale, o2, keep);
    if (!keep) std::copy(o2.ptr<float>(), o2.ptr<float>() + o2.numel(), o.ptr<float>());
    for (int64_t i = 0; i < o.numel(); ++i) ASSERT_EQ(o2.ptr<float>()[i], o.ptr<float>()[i]) << i;
  }
  Tensor dq = host_tensor(in.q.shape), dk = host_tensor(in.k.shape), dv = host_tensor(in.v.shape);
  Tensor da = host_tensor({T, HV}), db = host_tensor({T, HV});
  be->gdn_gated_bwd(nullptr, r, in.q, in.k, in.v, gates, in.seq, in.scale, dq, dk, dv, da, db);
  auto loss = [&] {
    be->gdn_gated_fwd(in.q, in.k, in.v, gates, in.seq, in.scale, o2, std::nullopt);
    return weighted_sum(r, o2);
  };
  const double ea = fd_rel_error(a, da, loss, rng, 60), eb = fd_rel_error(b, db, loss, rng, 60);
  report("gdn_gated da FD rel err", ea);
  report("gdn_gated db FD rel err", eb);
  EXPECT_LT(ea, 1e-2);
  EXPECT_LT(eb, 1e-2);
}

TEST(CpuGdn, ThreadCountDoesNotChangeResults) {
  Rng rng(34);
  GdnInputs in = make_inputs({{90, 20}, 2, 4, 8, 8, -1.f, 0.f, 0.f, 1.f}, rng);
  Tensor o1 = host_tensor(in.v.shape), o3 = host_tensor(in.v.shape);
  make_cpu_backend(1)->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o1);
  make_cpu_backend(3)->gdn_fwd(in.q, in.k, in.v, in.g, in.beta, in.seq, in.scale, o3);
  EXPECT_EQ(max_abs_diff(o1, o3), 0.0);
}

}  // namespace
}  // namespace deltatune
