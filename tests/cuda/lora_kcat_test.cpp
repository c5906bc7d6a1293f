// The K-concatenated LoRA products of modules that share an input (model/lora_linear.h kcat_*): on a bf16 CUDA
// backend, y_i = [x | u]·[W_i | 0 .. s_i·B_i]ᵀ, dx and the LoRA gradients against the grouped products with
// lora_up (same backend, same operands), at the GDN in_proj group's shape (qkv, z, b, a) with a token tail. Also
// the two LoraKcatOps against what they stand for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../unit/tiny_model_config.h"
#include "backend/backend.h"
#include "backend/lora_kcat_ops.h"
#include "lora/lora.h"
#include "model/lora_linear.h"

namespace deltatune {
namespace {

Tensor host_random(Shape s, std::mt19937& rng, float scale = 1.f) {
  Tensor t = host_tensor(std::move(s), DType::F32);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

std::vector<float> values(Backend& be, const Tensor& t) { return host_to_f32(be.download(t, DType::F32)); }

// max |a - b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return m > 0 ? d / m : d;
}

struct GroupRun {
  std::vector<std::vector<float>> ys, gA, gB;
  std::vector<float> dx;
  int64_t kcat = 0;
};

// The GDN in_proj group: small (hidden 64, qkv 2*2*16 + 4*16 = 128, z 64, b / a 4; r 8; 77 tokens) or at the
// 2b shape (hidden 2048, qkv 6144, z 2048, b / a 16; r 16, the lora_dy kernel's rank; 1000 tokens).
GroupRun run_group(bool kcat, bool big) {
  ModelConfig cfg = testing_tiny::dense(big ? 2048 : 64, 96, {LayerKind::LinearAttention});
  if (big) cfg.lin_k_heads = 16, cfg.lin_v_heads = 16, cfg.lin_k_dim = 128, cfg.lin_v_dim = 128;
  else cfg.lin_k_heads = 2, cfg.lin_v_heads = 4, cfg.lin_k_dim = 16, cfg.lin_v_dim = 16;
  auto be = make_cuda_backend(0, DType::BF16);
  LoraSpec spec;
  spec.r = big ? 16 : 8;
  spec.alpha = 2.0 * spec.r;
  spec.groups = {"linear_attn"};
  LoraAdapter adapter = lora_create(cfg, spec, 7);
  lora_to_backend(adapter, *be);
  std::mt19937 rng(5);
  const int64_t T = big ? 1000 : 77, H = cfg.hidden_size;
  std::vector<LoraModule*> ls;
  std::vector<BaseMatrix> ws;
  std::vector<Tensor> ys, dys;
  for (const char* leaf : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"}) {
    LoraModule* m = adapter.find(std::string("layers.0.linear_attn.") + leaf);
    EXPECT_NE(m, nullptr) << leaf;
    m->B = be->upload(host_random(m->B.shape, rng, big ? 0.05f : 0.5f), DType::F32);  // lora_create's B is zero
    ls.push_back(m);
    ws.emplace_back(be->upload(host_random({m->out, m->in}, rng, big ? 0.02f : 0.2f), DType::BF16));
    ys.push_back(be->alloc({T, m->out}, DType::BF16));
    dys.push_back(be->upload(host_random({T, m->out}, rng), DType::BF16));
  }
  lora_zero_grad(adapter, *be);
  const Tensor x = be->upload(host_random({T, H}, rng), DType::BF16);
  Tensor dx = be->alloc({T, H}, DType::BF16);
  LoraRuntime rt;
  rt.training = true;
  std::vector<SharedInputModule> sm;
  for (size_t i = 0; i < ls.size(); ++i) sm.push_back({&ws[i], ls[i], 100 + i});
  GroupRun out;
  if (kcat) {
    std::vector<KcatPadGroup> g(1);
    for (BaseMatrix& w : ws) g[0].ws.push_back(&w);
    g[0].loras = ls;
    EXPECT_EQ(kcat_pad_weights(*be, g), 1u);
    const void* first = ws[0].w.data;
    EXPECT_EQ(kcat_pad_weights(*be, g), 1u);
    EXPECT_EQ(ws[0].w.data, first) << "padding again for the same rank is a no-op";
  }
  {
    const LoraComputeCopies copies(*be, &adapter);
    std::vector<Tensor*> yp;
    std::vector<const Tensor*> dyp;
    for (size_t i = 0; i < ls.size(); ++i) yp.push_back(&ys[i]), dyp.push_back(&dys[i]);
    LinearGroupCache cache;
    Tensor xin = x;
    if (kcat) {
      kcat_write_tails(*be, sm);
      out.kcat = kcat_cols(*be, sm, rt);
      xin = be->alloc({T, H + out.kcat}, DType::BF16);
      be->copy_cols(xin, 0, x, 0, H);
    }
    linear_group_fwd(*be, xin, sm, rt, yp, cache);
    EXPECT_EQ(cache.kcat, out.kcat);
    linear_group_bwd(*be, dyp, sm, rt, cache, dx, false);
  }
  for (size_t i = 0; i < ls.size(); ++i) {
    out.ys.push_back(values(*be, ys[i]));
    out.gA.push_back(values(*be, ls[i]->gA));
    out.gB.push_back(values(*be, ls[i]->gB));
  }
  out.dx = values(*be, dx);
  return out;
}

class CudaLoraKcat : public ::testing::TestWithParam<bool> {};

TEST_P(CudaLoraKcat, GdnInProjEqualsGroupedProducts) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const bool big = GetParam();
  const GroupRun k = run_group(true, big), g = run_group(false, big);
  EXPECT_EQ(k.kcat, big ? 4 * 16 : 4 * 8) << "the group did not run K-concatenated";
  EXPECT_EQ(g.kcat, 0);
  const char* names[] = {"qkv", "z", "b", "a"};
  for (size_t i = 0; i < 4; ++i) {
    // y: the rank-r term in the GEMM's fp32 sum instead of rounded to bf16 first (one bf16 rounding apart);
    // gA / gB: the same products on the same bf16 operands.
    const double ry = rel_diff(k.ys[i], g.ys[i]), ra = rel_diff(k.gA[i], g.gA[i]), rb = rel_diff(k.gB[i], g.gB[i]);
    EXPECT_LE(ry, 1e-2) << names[i] << " y";
    EXPECT_LE(ra, 1e-3) << names[i] << " gA";
    EXPECT_LE(rb, 1e-3) << names[i] << " gB";
    std::printf("[kcat] %s %-3s y %.2e gA %.2e gB %.2e\n", big ? "2b" : "small", names[i], ry, ra, rb);
  }
  const double rdx = rel_diff(k.dx, g.dx);
  EXPECT_LE(rdx, 1e-2) << "dx";
  std::printf("[kcat] %s dx %.2e\n", big ? "2b" : "small", rdx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLoraKcat, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "gdn_2b_r16" : "small_r8"; });

TEST(CudaLoraKcatOps, EqualWhatTheyStandFor) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  auto be = make_cuda_backend(0, DType::BF16);
  LoraKcatOps* ops = lora_kcat_ops(*be);
  ASSERT_NE(ops, nullptr);
  std::mt19937 rng(9);
  const int64_t T = 300, H = 2048, pad = 48;
  // rmsnorm_fwd_into: the same bits as rmsnorm_fwd, written into columns [0, H) of padded rows.
  const Tensor x = be->upload(host_random({T, H}, rng), DType::BF16);
  const Tensor w = be->upload(host_random({H}, rng), DType::F32);
  Tensor y = be->alloc({T, H}, DType::BF16), rstd = be->alloc({T}, DType::F32);
  be->rmsnorm_fwd(x, w, 1e-6f, true, y, rstd);
  Tensor yp = be->alloc({T, H + pad}, DType::BF16), rstd2 = be->alloc({T}, DType::F32);
  ops->rmsnorm_fwd_into(x, w, 1e-6f, true, Backend::Cols(yp, 0, H), rstd2);
  Tensor back = be->alloc({T, H}, DType::BF16);
  be->copy_cols(back, 0, yp, 0, H);
  EXPECT_EQ(values(*be, back), values(*be, y));
  EXPECT_EQ(values(*be, rstd2), values(*be, rstd));
  // scaled_copies_into: 5 sources (two launches), F32 and bf16, into column blocks of one padded matrix each.
  std::vector<Tensor> srcs, dsts;
  std::vector<const Tensor*> sp;
  std::vector<float> alphas;
  std::vector<Backend::Cols> cols;
  for (int i = 0; i < 5; ++i) {
    const int64_t rows = 16 + 40 * i;
    srcs.push_back(be->upload(host_random({rows, 16}, rng), i % 2 ? DType::BF16 : DType::F32));
    dsts.push_back(be->zeros({rows, 64 + 16 * (i + 1)}, DType::BF16));
    alphas.push_back(0.5f + static_cast<float>(i));
  }
  for (int i = 0; i < 5; ++i) sp.push_back(&srcs[i]), cols.emplace_back(dsts[i], 64 + 16 * i, 16);
  ops->scaled_copies_into(sp, alphas, cols);
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> s = values(*be, srcs[i]), d = values(*be, dsts[i]);
    const int64_t ld = 64 + 16 * (i + 1), rows = srcs[i].rows();
    double worst = 0, outside = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ld; ++c) {
        const float v = d[static_cast<size_t>(r * ld + c)];
        if (c >= 64 + 16 * i && c < 64 + 16 * (i + 1)) {
          const float want = alphas[i] * s[static_cast<size_t>(r * 16 + c - 64 - 16 * i)];
          worst = std::max(worst, std::fabs(double(v) - want) / std::max(1e-3, std::fabs(double(want))));
        } else {
          outside = std::max(outside, std::fabs(double(v)));
        }
      }
    EXPECT_LE(worst, 4e-3) << "module " << i;  // one bf16 rounding
    EXPECT_EQ(outside, 0.0) << "module " << i << " wrote outside its block";
  }
}

}  // namespace
}  // namespace deltatune

namespace deltatune {
namespace {

// How much of a rank-r term far below y's bf16 resolution each path keeps (early LoRA training: B ~ lr after a
// few Adam steps, the term ~1e-4 of y): gain = Σ (y − y₀)·t / Σ t², t = s·u·Bᵀ in double on the host, y₀ the
// same path with B = 0. The K-concatenated GEMM adds the term inside its fp32 sum and rounds once; the separate
// path rounds the term to bf16 (lora_up) and the base GEMM adds it as C (beta 1).
TEST(CudaLoraKcatOps, TinyRankTermGain) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  auto be = make_cuda_backend(0, DType::BF16);
  LoraKcatOps* ops = lora_kcat_ops(*be);
  ASSERT_NE(ops, nullptr);
  std::mt19937 rng(13);
  const int64_t T = 1024, in = 2048, out = 2048, r = 16;
  const float s = 2.f;
  const Tensor x = be->upload(host_random({T, in}, rng), DType::BF16);
  const Tensor W = be->upload(host_random({out, in}, rng, 0.02f), DType::BF16);
  const Tensor A = be->upload(host_random({r, in}, rng, 0.022f), DType::BF16);
  for (const float bscale : {1e-5f, 1e-4f, 1e-3f, 1e-2f}) {
    const Tensor B = be->upload(host_random({out, r}, rng, bscale), DType::BF16), B0 = be->zeros({out, r}, DType::BF16);
    Tensor u = be->alloc({T, r}, DType::BF16);
    be->gemm(x, false, A, true, u, 1.f, 0.f);
    // t = s·u·Bᵀ on the host
    const std::vector<float> uh = values(*be, u), bh = values(*be, B);
    std::vector<double> t(static_cast<size_t>(T * out));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t n = 0; n < out; ++n) {
        double acc = 0;
        for (int64_t j = 0; j < r; ++j) acc += double(uh[size_t(i * r + j)]) * double(bh[size_t(n * r + j)]);
        t[size_t(i * out + n)] = s * acc;
      }
    auto gain = [&](const std::vector<float>& y, const std::vector<float>& y0) {
      double num = 0, den = 0;
      for (size_t k = 0; k < t.size(); ++k) num += (double(y[k]) - double(y0[k])) * t[k], den += t[k] * t[k];
      return num / den;
    };
    // separate: y (=) s·u·Bᵀ (lora_up), y += x·Wᵀ
    auto separate = [&](const Tensor& b) {
      Tensor y = be->alloc({T, out}, DType::BF16);
      be->lora_up(u, b, s, nullptr, y);
      be->gemm(x, false, W, true, y, 1.f, 1.f);
      return values(*be, y);
    };
    // K-concatenated: [x | u]·[W | s·B]ᵀ
    Tensor xp = be->alloc({T, in + r}, DType::BF16), wp = be->zeros({out, in + r}, DType::BF16);
    be->copy_cols(xp, 0, x, 0, in);
    be->copy_cols(xp, in, u, 0, r);
    be->copy_cols(wp, 0, W, 0, in);
    auto kcat = [&](const Tensor& b) {
      const Tensor* src[] = {&b};
      const float alpha[] = {s};
      const Backend::Cols dst[] = {Backend::Cols(wp, in, r)};
      ops->scaled_copies_into(src, alpha, dst);
      Tensor y = be->alloc({T, out}, DType::BF16);
      be->gemm_cols(xp, false, wp, true, y, 1.f, 0.f);
      return values(*be, y);
    };
    const double gs = gain(separate(B), separate(B0)), gk = gain(kcat(B), kcat(B0));
    std::printf("[kcat] tiny term B ~ %.0e: gain separate %.3f, K-concatenated %.3f\n", double(bscale), gs, gk);
    EXPECT_NEAR(gk, 1.0, 0.2) << "B ~ " << bscale;
  }
}

}  // namespace
}  // namespace deltatune
