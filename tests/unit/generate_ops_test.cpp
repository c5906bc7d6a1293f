// The CPU generation ops (backend.h "generation") against the training ops they continue: a sequence fed in
// two calls through the state (conv history, delta-rule state, KV cache) gives what one call over the whole
// sequence gives (conv1d_silu_fwd, gdn_fwd, attention_fwd).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using cpu_test::Rng;

// Sequences of `full` lengths cut after `first[n]` tokens: the rows of each part, packed.
struct Split {
  std::vector<int32_t> full, first;
  std::vector<int64_t> rows(int part) const {
    std::vector<int64_t> r;
    int64_t start = 0;
    for (size_t n = 0; n < full.size(); ++n) {
      const int64_t b = part == 0 ? 0 : first[n], e = part == 0 ? first[n] : full[n];
      for (int64_t i = b; i < e; ++i) r.push_back(start + i);
      start += full[n];
    }
    return r;
  }
  SeqLayout layout(int part) const {
    std::vector<int32_t> lens, pos;
    for (size_t n = 0; n < full.size(); ++n) {
      const int32_t b = part == 0 ? 0 : first[n], e = part == 0 ? first[n] : full[n];
      lens.push_back(e - b);
      for (int32_t i = b; i < e; ++i) pos.push_back(i);
    }
    SeqLayout s = cpu_test::make_seq(lens);
    s.positions = cpu_test::i32_tensor(pos);
    return s;
  }
};

Tensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t w = t.numel() / t.dim(0);
  Shape s = t.shape;
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = host_tensor(s);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(t.ptr<float>() + rows[i] * w, t.ptr<float>() + (rows[i] + 1) * w, out.ptr<float>() + i * w);
  return out;
}

// Both parts' outputs back in the full order.
void expect_near_parts(const Tensor& whole, const Split& sp, const Tensor& p0, const Tensor& p1, float tol) {
  const int64_t w = whole.numel() / whole.dim(0);
  for (int part = 0; part < 2; ++part) {
    const Tensor& p = part == 0 ? p0 : p1;
    const auto rows = sp.rows(part);
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < w; ++c)
        ASSERT_NEAR(p.ptr<float>()[i * w + c], whole.ptr<float>()[rows[i] * w + c], tol)
            << "part " << part << " row " << rows[i] << " col " << c;
  }
}

const Split kSplit{{7, 3, 6}, {5, 1, 0}};  // a cut inside the conv's reach, one after 1 token, one at the start

TEST(GenerateOps, ConvStepContinuesTheConv) {
  auto be = make_cpu_backend(2);
  Rng rng(1);
  const int64_t C = 6, K = 4, T = 16;
  const Tensor x = cpu_test::randn_tensor(rng, {T, C}), w = cpu_test::randn_tensor(rng, {C, K}, 0.5f);
  Tensor whole = host_tensor({T, C});
  be->conv1d_silu_fwd(x, w, cpu_test::make_seq(kSplit.full), whole);
  Tensor state = host_tensor({3, K - 1, C});
  Tensor parts[2];
  for (int part = 0; part < 2; ++part) {
    const Tensor xp = take_rows(x, kSplit.rows(part));
    parts[part] = host_tensor(xp.shape);
    be->conv1d_silu_step(xp, w, kSplit.layout(part), state, parts[part]);
  }
  expect_near_parts(whole, kSplit, parts[0], parts[1], 1e-6f);
}

TEST(GenerateOps, RecurrentStepContinuesTheDeltaRule) {
  auto be = make_cpu_backend(2);
  Rng rng(2);
  const int64_t T = 16, HK = 2, HV = 4, dk = 8, dv = 6;
  const Tensor q = cpu_test::randn_tensor(rng, {T, HK, dk}), k = cpu_test::randn_tensor(rng, {T, HK, dk}),
               v = cpu_test::randn_tensor(rng, {T, HV, dv}), g = cpu_test::rand_tensor(rng, {T, HV}, -1.f, -0.01f),
               beta = cpu_test::rand_tensor(rng, {T, HV}, 0.f, 1.f);
  Tensor whole = host_tensor({T, HV, dv});
  be->gdn_fwd(q, k, v, g, beta, cpu_test::make_seq(kSplit.full), 0.35f, whole);
  Tensor state = host_tensor({3, HV, dk, dv});
  Tensor parts[2];
  for (int part = 0; part < 2; ++part) {
    const auto rows = kSplit.rows(part);
    parts[part] = host_tensor({static_cast<int64_t>(rows.size()), HV, dv});
    be->gdn_recurrent(take_rows(q, rows), take_rows(k, rows), take_rows(v, rows), take_rows(g, rows),
                      take_rows(beta, rows), kSplit.layout(part), 0.35f, state, parts[part]);
  }
  expect_near_parts(whole, kSplit, parts[0], parts[1], 2e-5f);
}

TEST(GenerateOps, CachedAttentionContinuesCausalAttention) {
  auto be = make_cpu_backend(2);
  Rng rng(3);
  const int64_t T = 16, nH = 4, nKV = 2, hd = 8, L = 9;
  const Tensor q = cpu_test::randn_tensor(rng, {T, nH, hd}), k = cpu_test::randn_tensor(rng, {T, nKV, hd}),
               v = cpu_test::randn_tensor(rng, {T, nKV, hd});
  Tensor whole = host_tensor({T, nH, hd}), lse = host_tensor({T, nH});
  be->attention_fwd(q, k, v, cpu_test::make_seq(kSplit.full), 0.3f, whole, lse);
  Tensor kc = host_tensor({3, L, nKV, hd}), vc = host_tensor({3, L, nKV, hd});
  Tensor parts[2];
  for (int part = 0; part < 2; ++part) {
    const auto rows = kSplit.rows(part);
    const SeqLayout seq = kSplit.layout(part);
    be->kv_cache_write(take_rows(k, rows), take_rows(v, rows), seq, kc, vc);
    parts[part] = host_tensor({static_cast<int64_t>(rows.size()), nH, hd});
    be->attention_cached(take_rows(q, rows), kc, vc, seq, 0.3f, parts[part]);
  }
  expect_near_parts(whole, kSplit, parts[0], parts[1], 1e-5f);
}

TEST(GenerateOps, CacheWritePastTheEndIsRefused) {
  auto be = make_cpu_backend(1);
  Tensor kc = host_tensor({1, 2, 1, 4}), vc = host_tensor({1, 2, 1, 4});
  SeqLayout seq = cpu_test::make_seq({1});
  seq.positions = cpu_test::i32_tensor({2});
  const Tensor k = host_tensor({1, 1, 4});
  EXPECT_THROW(be->kv_cache_write(k, k, seq, kc, vc), Error);
}

}  // namespace
}  // namespace deltatune
