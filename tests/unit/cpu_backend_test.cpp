// CPU backend: memory, dtype conversion, gemm, elementwise ops, embedding, optimizers.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace deltatune {
namespace {

using namespace cpu_test;

TEST(CpuBackend, BasicsAndMemoryStats) {
  auto be = make_cpu_backend(2);
  EXPECT_EQ(be->device(), Device::CPU);
  EXPECT_EQ(be->compute_dtype(), DType::F32);
  EXPECT_EQ(be->weight_dtype(), DType::F32);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_GT(be->memory_stats().total_bytes, 0);  // physical RAM
  const int64_t before = be->memory_stats().allocated_bytes;
  {
    Tensor a = be->alloc({100, 10}, DType::F32);
    Tensor b = be->zeros({50}, DType::I32);
    EXPECT_EQ(be->memory_stats().allocated_bytes - before, 4000 + 200);
    EXPECT_EQ(b.ptr<int32_t>()[49], 0);
    Tensor view = a.slice(10, 20);  // views share storage: no new bytes
    EXPECT_EQ(be->memory_stats().allocated_bytes - before, 4200);
  }
  const MemoryStats s = be->memory_stats();
  EXPECT_EQ(s.allocated_bytes, before);
  EXPECT_GE(s.peak_allocated_bytes, 4200);
}

TEST(CpuBackend, UploadConvertsBf16AndF16ToF32) {
  auto be = make_cpu_backend(2);
  Tensor h = host_tensor({3}, DType::F32);
  h.ptr<float>()[0] = 1.5f;
  h.ptr<float>()[1] = -3.25f;
  h.ptr<float>()[2] = 1.00390625f;  // rounds to 1.0 in bf16
  for (DType src : {DType::BF16, DType::F16}) {
    Tensor d = be->upload(host_convert(h, src), DType::F32);
    ASSERT_EQ(d.dtype, DType::F32);
    EXPECT_EQ(d.ptr<float>()[0], 1.5f);
    EXPECT_EQ(d.ptr<float>()[1], -3.25f);
  }
  EXPECT_EQ(be->upload(host_convert(h, DType::BF16), DType::F32).ptr<float>()[2], 1.0f);
  Tensor back = be->download(be->upload(h, DType::F32), DType::BF16);
  EXPECT_EQ(back.dtype, DType::BF16);
  EXPECT_EQ(bf16_to_f32(back.ptr<uint16_t>()[1]), -3.25f);
  Tensor ids = be->upload(i32_tensor({7, -100}), DType::I32);
  EXPECT_EQ(ids.ptr<int32_t>()[1], -100);
  EXPECT_THROW(be->upload(h, DType::I32), Error);  // floats do not silently become ints
}

TEST(CpuBackend, CopyAndCopyCols) {
  auto be = make_cpu_backend(2);
  Rng rng(1);
  Tensor src = rand_tensor(rng, {4, 6});
  Tensor dst = be->zeros({24}, DType::F32);
  be->copy(dst, src);
  EXPECT_EQ(max_abs_diff(dst, src), 0.0);
  Tensor half = be->alloc({4, 6}, DType::BF16);
  be->copy(half, src);
  EXPECT_LT(max_abs_diff(be->download(half, DType::F32), src), 1e-2);
  Tensor wide = be->zeros({4, 10}, DType::F32);
  be->copy_cols(wide, 5, src, 2, 3);  // wide[:, 5:8] = src[:, 2:5]
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 10; ++c) {
      const float want = (c >= 5 && c < 8) ? src.ptr<float>()[r * 6 + (c - 5 + 2)] : 0.f;
      EXPECT_EQ(wide.ptr<float>()[r * 10 + c], want) << r << "," << c;
    }
  EXPECT_THROW(be->copy_cols(wide, 8, src, 0, 3), Error);
}

// op(A)·op(B) in double, for gemm checks.
Tensor gemm_ref(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c0, float alpha, float beta) {
  const int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols(), N = tb ? b.rows() : b.cols();
  Tensor c = clone(c0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float av = ta ? a.ptr<float>()[k * M + i] : a.ptr<float>()[i * K + k];
        const float bv = tb ? b.ptr<float>()[j * K + k] : b.ptr<float>()[k * N + j];
        s += double(av) * bv;
      }
      float& out = c.ptr<float>()[i * N + j];
      out = static_cast<float>(alpha * s + (beta == 0.f ? 0.0 : double(beta) * out));
    }
  return c;
}

TEST(CpuGemm, AllTransposesAndAwkwardShapesMatchDoubleReference) {
  Rng rng(2);
  double worst = 0;
  for (int threads : {1, 2, 3}) {
    auto be = make_cpu_backend(threads);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {5, 7, 11}, {13, 17, 300}, {97, 33, 64}, {200, 130, 513},
                           {6, 16, 256}, {7, 2049, 5}}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        Tensor a = rand_tensor(rng, ta ? Shape{K, M} : Shape{M, K});
        Tensor b = rand_tensor(rng, tb ? Shape{N, K} : Shape{K, N});
        Tensor c = rand_tensor(rng, {M, N});
        const float alpha = 0.75f, beta = (t == 3) ? 0.f : 0.5f;
        if (beta == 0.f) c.ptr<float>()[0] = NAN;  // beta == 0 must ignore old content
        Tensor want = gemm_ref(a, ta, b, tb, c, alpha, beta);
        be->gemm(a, ta, b, tb, c, alpha, beta);
        // fp32 accumulation over K terms of size ≤ 1: error ~ K·2^-24 in the worst case.
        const double err = max_abs_diff(c, want);
        EXPECT_LT(err, 1e-6 * K + 1e-6) << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
        worst = std::max(worst, err / K);
      }
    }
  }
  report("gemm max abs err / K (vs fp64)", worst);
  auto be = make_cpu_backend(2);
  Tensor a = host_tensor({2, 3}), b = host_tensor({4, 4}), c = host_tensor({2, 4});
  EXPECT_THROW(be->gemm(a, false, b, false, c, 1.f, 0.f), Error);
}

TEST(CpuGemm, ResultDoesNotDependOnThreadCount) {
  Rng rng(3);
  Tensor a = rand_tensor(rng, {300, 700}), b = rand_tensor(rng, {500, 700});
  Tensor c1 = host_tensor({300, 500}), c4 = host_tensor({300, 500});
  make_cpu_backend(1)->gemm(a, false, b, true, c1, 1.f, 0.f);
  make_cpu_backend(4)->gemm(a, false, b, true, c4, 1.f, 0.f);
  EXPECT_EQ(max_abs_diff(c1, c4), 0.0);
}

TEST(CpuGemm, TrainingShapeTakesMilliseconds) {
  // Timed in process CPU time: wall time on a shared 2-core CI machine says more about the neighbours.
  auto be = make_cpu_backend(2);
  Rng rng(4);
  Tensor x = rand_tensor(rng, {4096, 64}), w = rand_tensor(rng, {512, 64}), y = host_tensor({4096, 512});
  be->gemm(x, false, w, true, y, 1.f, 0.f);  // warm up
  const int reps = 5;
  const std::clock_t c0 = std::clock();
  for (int i = 0; i < reps; ++i) be->gemm(x, false, w, true, y, 1.f, 0.f);
  const double ms = 1000.0 * double(std::clock() - c0) / CLOCKS_PER_SEC / reps;
  report("gemm [4096x64]·[512x64]ᵀ cpu-ms", ms);
  // ~9 cpu-ms with AVX2 (≈30 GFLOP/s per core), ~40 on baseline SSE2; a naive triple loop takes ~300.
  EXPECT_LT(ms, 150.0);
  // The backward shapes of the same layer: dX = dY·W and dW = dYᵀ·X.
  Tensor dx = host_tensor({4096, 64}), dw = host_tensor({512, 64});
  const std::clock_t c1 = std::clock();
  be->gemm(y, false, w, false, dx, 1.f, 0.f);
  be->gemm(y, true, x, false, dw, 1.f, 0.f);
  const double ms2 = 1000.0 * double(std::clock() - c1) / CLOCKS_PER_SEC;
  report("gemm backward pair cpu-ms", ms2);
  EXPECT_LT(ms2, 300.0);
}

TEST(CpuBackend, ElementwiseOps) {
  auto be = make_cpu_backend(2);
  Rng rng(5);
  Tensor x = rand_tensor(rng, {1000, 37}), y = rand_tensor(rng, {1000, 37});
  Tensor y0 = clone(y);
  be->add(y, x, -0.5f);
  be->scale(y, 2.f);
  double ss = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_FLOAT_EQ(y.ptr<float>()[i], 2.f * (y0.ptr<float>()[i] - 0.5f * x.ptr<float>()[i]));
    ss += double(x.ptr<float>()[i]) * x.ptr<float>()[i];
  }
  EXPECT_NEAR(be->sum_squares(x), ss, 1e-9 * ss);
  EXPECT_TRUE(be->all_finite(x));
  x.ptr<float>()[777] = INFINITY;
  EXPECT_FALSE(be->all_finite(x));
  x.ptr<float>()[777] = NAN;
  EXPECT_FALSE(be->all_finite(x));
}

TEST(CpuBackend, DropoutMatchesCounterHashAndIsItsOwnBackward) {
  auto be = make_cpu_backend(2);
  Rng rng(6);
  const float p = 0.3f;
  Tensor x = rand_tensor(rng, {200, 50}), y = host_tensor({200, 50});
  be->dropout(x, p, 1234, y);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = dropout_uniform(1234, i) >= p;
    kept += keep;
    EXPECT_EQ(y.ptr<float>()[i], keep ? x.ptr<float>()[i] / (1.f - p) : 0.f);
  }
  EXPECT_NEAR(double(kept) / x.numel(), 1.0 - p, 0.02);  // 10k draws: σ ≈ 0.005
  // Backward = same call on dy: the gradient of Σ r⊙dropout(x) is dropout(r).
  Tensor r = rand_tensor(rng, {200, 50}), dx = host_tensor({200, 50});
  be->dropout(r, p, 1234, dx);
  auto loss = [&] {
    be->dropout(x, p, 1234, y);
    return weighted_sum(r, y);
  };
  EXPECT_LT(fd_rel_error(x, dx, loss, rng), 1e-2);
  be->dropout(x, 0.f, 9, y);
  EXPECT_EQ(max_abs_diff(x, y), 0.0);
}

TEST(CpuBackend, EmbeddingGathersRowsAndRejectsBadIds) {
  auto be = make_cpu_backend(2);
  Rng rng(7);
  Tensor table = rand_tensor(rng, {10, 4});
  Tensor ids = i32_tensor({3, 0, 9, 3});
  Tensor out = host_tensor({4, 4});
  be->embedding_fwd(ids, table, out);
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(out.ptr<float>()[t * 4 + c], table.ptr<float>()[ids.ptr<int32_t>()[t] * 4 + c]);
  Tensor bad = i32_tensor({10});
  Tensor out1 = host_tensor({1, 4});
  EXPECT_THROW(be->embedding_fwd(bad, table, out1), Error);
}

TEST(CpuOptim, AdamWFirstStepIsSignTimesLr) {
  // Step 1 of Adam: m̂ = g, v̂ = g², update = lr·g/(|g| + eps); decoupled decay shrinks p first.
  auto be = make_cpu_backend(2);
  Tensor p = host_tensor({3}), g = host_tensor({3}), m = host_tensor({3}), v = host_tensor({3});
  const float pv[3] = {1.f, -2.f, 0.5f}, gv[3] = {0.3f, -0.001f, 4.f};
  for (int i = 0; i < 3; ++i) {
    p.ptr<float>()[i] = pv[i];
    g.ptr<float>()[i] = gv[i];
  }
  const float lr = 1e-2f, wd = 0.1f, eps = 1e-8f;
  be->adamw_step(p, g, m, v, lr, 0.9f, 0.999f, eps, wd, 1);
  for (int i = 0; i < 3; ++i) {
    const double want = pv[i] * (1 - double(lr) * wd) - lr * gv[i] / (std::fabs(gv[i]) + eps);
    EXPECT_NEAR(p.ptr<float>()[i], want, 1e-6) << i;
    EXPECT_NEAR(m.ptr<float>()[i], 0.1 * gv[i], 1e-6 * std::fabs(gv[i]));
    EXPECT_NEAR(v.ptr<float>()[i], 0.001 * gv[i] * gv[i], 1e-6 * gv[i] * gv[i]);
  }
}

TEST(CpuOptim, AdamWMatchesTorchTrajectory) {
  // Values from torch.optim.AdamW (tests/goldens/make_adamw_golden.py): p0 = [0.5, -1.0, 2.0],
  // gradients g_t = [0.1·t, −0.2, 0.05·(−1)^t] for t = 1..5, lr 1e-2, betas (0.9, 0.95), eps 1e-8, wd 0.1.
  auto be = make_cpu_backend(1);
  Tensor p = host_tensor({3}), g = host_tensor({3}), m = host_tensor({3}), v = host_tensor({3});
  p.ptr<float>()[0] = 0.5f;
  p.ptr<float>()[1] = -1.f;
  p.ptr<float>()[2] = 2.f;
  for (int t = 1; t <= 5; ++t) {
    g.ptr<float>()[0] = static_cast<float>(0.1 * t);
    g.ptr<float>()[1] = -0.2f;
    g.ptr<float>()[2] = (t % 2 ? -0.05f : 0.05f);
    be->adamw_step(p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  const float torch_p[3] = {0.44975197315216064f, -0.945110023021698f, 2.0043251514434814f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p.ptr<float>()[i], torch_p[i], 2e-7) << i;
}

TEST(CpuOptim, SgdWithWeightDecay) {
  auto be = make_cpu_backend(2);
  Tensor p = host_tensor({2}), g = host_tensor({2});
  p.ptr<float>()[0] = 1.f;
  p.ptr<float>()[1] = -2.f;
  g.ptr<float>()[0] = 0.5f;
  g.ptr<float>()[1] = 0.25f;
  be->sgd_step(p, g, 0.1f, 0.01f);
  EXPECT_FLOAT_EQ(p.ptr<float>()[0], 1.f - 0.1f * (0.5f + 0.01f * 1.f));
  EXPECT_FLOAT_EQ(p.ptr<float>()[1], -2.f - 0.1f * (0.25f - 0.01f * 2.f));
}

}  // namespace
}  // namespace deltatune
