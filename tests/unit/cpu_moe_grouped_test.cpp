// CPU backend: MoE dispatch (stable sort by expert), combine, grouped expert GEMMs (both weight
// orientations and the weight-gradient form) against per-expert loops, and permute3 on the expert LoRA B
// layout of peft-adapter.md §6.2.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu_test_util.h"
#include "model/moe_load_stats.h"

namespace deltatune {
namespace {

using namespace cpu_test;

struct Dispatch {
  Tensor offsets, row_token, row_slot, slot_row, load;
};

Dispatch run_dispatch(Backend& be, const std::vector<int32_t>& idx, int64_t T, int64_t K, int E) {
  Tensor ti = i32_tensor(idx).view({T, K});
  Dispatch d;
  d.offsets = host_tensor({E + 1}, DType::I32);
  d.row_token = host_tensor({T * K}, DType::I32);
  d.row_slot = host_tensor({T * K}, DType::I32);
  d.slot_row = host_tensor({T * K}, DType::I32);
  d.load = host_tensor({E});
  for (int e = 0; e < E; ++e) d.load.ptr<float>()[e] = 1.f;  // (+=): starts at one
  be.moe_dispatch(ti, E, d.offsets, d.row_token, d.row_slot, d.slot_row, &d.load);
  return d;
}

// The expected result written out directly: experts in order, each expert's slots in increasing order.
void expect_sorted(const Dispatch& d, const std::vector<int32_t>& idx, int64_t K, int E) {
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<int32_t> want_slot;
  std::vector<int32_t> want_off{0};
  for (int e = 0; e < E; ++e) {
    for (int64_t s = 0; s < n; ++s)
      if (idx[s] == e) want_slot.push_back(static_cast<int32_t>(s));
    want_off.push_back(static_cast<int32_t>(want_slot.size()));
  }
  for (int e = 0; e <= E; ++e) EXPECT_EQ(d.offsets.ptr<int32_t>()[e], want_off[e]) << "offsets[" << e << "]";
  for (int e = 0; e < E; ++e)
    EXPECT_EQ(d.load.ptr<float>()[e], 1.f + float(want_off[e + 1] - want_off[e])) << "load[" << e << "]";
  for (int64_t r = 0; r < n; ++r) {
    ASSERT_EQ(d.row_slot.ptr<int32_t>()[r], want_slot[r]) << "row " << r;
    EXPECT_EQ(d.row_token.ptr<int32_t>()[r], want_slot[r] / K) << "row " << r;
    EXPECT_EQ(d.slot_row.ptr<int32_t>()[want_slot[r]], r) << "row " << r;
  }
}

TEST(CpuMoeGrouped, DispatchIsAStableSortByExpert) {
  auto be = make_cpu_backend(2);
  Rng rng(7);
  const int64_t T = 53, K = 3;
  const int E = 9;
  std::vector<int32_t> idx(T * K);
  for (auto& v : idx) {
    v = static_cast<int32_t>(rng.index(E));
    if (v == 4 || v == 8) v = 2;  // experts 4 and 8 (the last) get no tokens
  }
  expect_sorted(run_dispatch(*be, idx, T, K, E), idx, K, E);
  // Every slot on one expert.
  std::vector<int32_t> one(T * K, 5);
  expect_sorted(run_dispatch(*be, one, T, K, E), one, K, E);
  // Out-of-range experts are an error that names the slot.
  idx[17] = E;
  EXPECT_THROW(run_dispatch(*be, idx, T, K, E), Error);
}

TEST(CpuMoeGrouped, CombineSumsWeightedExpertRowsPerToken) {
  auto be = make_cpu_backend(2);
  Rng rng(8);
  const int64_t T = 11, K = 2, H = 5;
  const int E = 4;
  std::vector<int32_t> idx(T * K);
  for (auto& v : idx) v = static_cast<int32_t>(rng.index(E));
  Dispatch d = run_dispatch(*be, idx, T, K, E);
  Tensor y = rand_tensor(rng, {T * K, H}), w = rand_tensor(rng, {T, K}, 0.f, 1.f);
  Tensor out = rand_tensor(rng, {T, H});  // (=): old content ignored
  be->moe_combine(y, d.slot_row, w, out);
  Tensor plain = host_tensor({T, H});
  be->moe_combine(y, d.slot_row, Tensor{}, plain);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) {
      float want = 0.f, want1 = 0.f;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t r = d.slot_row.ptr<int32_t>()[t * K + j];
        want += w.ptr<float>()[t * K + j] * y.ptr<float>()[r * H + c];
        want1 += y.ptr<float>()[r * H + c];
      }
      EXPECT_FLOAT_EQ(out.ptr<float>()[t * H + c], want);
      EXPECT_FLOAT_EQ(plain.ptr<float>()[t * H + c], want1);
    }
}

// offsets of `counts` rows per expert.
Tensor offsets_of(const std::vector<int32_t>& counts) {
  std::vector<int32_t> off{0};
  for (int32_t c : counts) off.push_back(off.back() + c);
  return i32_tensor(off);
}

// Tolerance: both sides are fp32 sums of at most 40 products of values in [-1, 1], in different orders.
constexpr float kTol = 2e-5f;

TEST(CpuMoeGrouped, GroupedGemmMatchesPerExpertGemm) {
  auto be = make_cpu_backend(2);
  Rng rng(9);
  const std::vector<int32_t> counts{5, 0, 13, 1, 0, 7};  // empty experts, incl. a run of them
  const int64_t E = 6, M = 26 + 3, N = 9, K = 17;        // 3 rows past offsets[E] stay untouched
  Tensor off = offsets_of(counts);
  Tensor x = rand_tensor(rng, {M, K});
  for (bool trans : {true, false}) {
    Tensor w = rand_tensor(rng, trans ? Shape{E, N, K} : Shape{E, K, N});
    for (float beta : {0.f, 0.5f}) {
      Tensor y0 = rand_tensor(rng, {M, N});
      Tensor y = clone(y0);
      be->grouped_gemm(x, w, trans, off, y, 0.75f, beta);
      for (int64_t e = 0, r0 = 0; e < E; r0 += counts[e], ++e)
        for (int64_t r = r0; r < r0 + counts[e]; ++r)
          for (int64_t n = 0; n < N; ++n) {
            float acc = 0.f;
            for (int64_t k = 0; k < K; ++k)
              acc += x.ptr<float>()[r * K + k] *
                     (trans ? w.ptr<float>()[(e * N + n) * K + k] : w.ptr<float>()[(e * K + k) * N + n]);
            EXPECT_NEAR(y.ptr<float>()[r * N + n], 0.75f * acc + beta * y0.ptr<float>()[r * N + n], kTol)
                << "trans " << trans << " beta " << beta << " row " << r << " col " << n;
          }
      for (int64_t i = 26 * N; i < M * N; ++i) EXPECT_EQ(y.ptr<float>()[i], y0.ptr<float>()[i]) << "past offsets[E]";
    }
  }
  Tensor bad = i32_tensor({0, 5, 4, 20, 21, 22, 26});  // decreasing
  Tensor w = rand_tensor(rng, {E, N, K}), y = host_tensor({M, N});
  EXPECT_THROW(be->grouped_gemm(x, w, true, bad, y, 1.f, 0.f), Error);
}

TEST(CpuMoeGrouped, WeightGradientSumsEachExpertsRows) {
  auto be = make_cpu_backend(2);
  Rng rng(10);
  const std::vector<int32_t> counts{0, 4, 9, 0, 2};
  const int64_t E = 5, M = 15, N = 6, K = 11;
  Tensor off = offsets_of(counts);
  Tensor a = rand_tensor(rng, {M, N}), b = rand_tensor(rng, {M, K});
  Tensor g0 = rand_tensor(rng, {E, N, K});
  Tensor g = clone(g0);
  be->grouped_gemm_wgrad(a, b, off, g, 2.f, 1.f);
  for (int64_t e = 0, r0 = 0; e < E; r0 += counts[e], ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        float acc = 0.f;
        for (int64_t r = r0; r < r0 + counts[e]; ++r) acc += a.ptr<float>()[r * N + n] * b.ptr<float>()[r * K + k];
        const int64_t i = (e * N + n) * K + k;
        EXPECT_NEAR(g.ptr<float>()[i], 2.f * acc + g0.ptr<float>()[i], kTol) << "expert " << e;
      }
  // beta 0: experts without rows come out zero.
  be->grouped_gemm_wgrad(a, b, off, g, 1.f, 0.f);
  for (int64_t i = 0; i < N * K; ++i) EXPECT_EQ(g.ptr<float>()[i], 0.f);
}

TEST(CpuMoeGrouped, Permute3RegroupsExpertLoraB) {
  auto be = make_cpu_backend(2);
  Rng rng(11);
  const int64_t out = 7, r = 3, E = 4;
  Tensor B = rand_tensor(rng, {out, r * E});  // PEFT: expert e's column k at k·E + e
  Tensor Bc = host_tensor({E, out, r});
  be->permute3(B, out, r, E, 2, 0, 1, Bc);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < r; ++k)
        EXPECT_EQ(Bc.ptr<float>()[(e * out + o) * r + k], B.ptr<float>()[o * r * E + k * E + e]);
  Tensor back = host_tensor({out, r * E});
  be->permute3(Bc, E, out, r, 1, 2, 0, back);
  EXPECT_EQ(vec(back), vec(B));
  EXPECT_THROW(be->permute3(B, out, r, E, 0, 0, 1, Bc), Error);
}

TEST(CpuMoeGrouped, LoadStatsAverageMaxRatioAndCvOverLayers) {
  // Layer 0: counts (2, 2, 2, 2): ratio 1, cv 0. Layer 1: (8, 0, 0, 0): mean 2, ratio 4, std sqrt(12), cv
  // sqrt(3). Layer 2 routed nothing (skipped).
  Tensor load = host_tensor({3, 4});
  const float c[12] = {2, 2, 2, 2, 8, 0, 0, 0, 0, 0, 0, 0};
  std::copy(c, c + 12, load.ptr<float>());
  const MoeLoadStats s = moe_load_stats(load);
  EXPECT_DOUBLE_EQ(s.max_ratio, (1.0 + 4.0) / 2);
  EXPECT_NEAR(s.cv, std::sqrt(3.0) / 2, 1e-12);
  EXPECT_EQ(moe_load_stats(Tensor{}).max_ratio, -1);
}

}  // namespace
}  // namespace deltatune
