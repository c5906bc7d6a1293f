// LoRA products of modules that share an input (model/lora_linear.h linear_group_fwd/bwd): with the A copies
// stacked by LoraComputeCopies they run as one [T, Σr] product; outputs, dx and the LoRA gradients equal the
// per-module linear_fwd/linear_bwd (CPU, F32).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "lora/lora.h"
#include "model/lora_linear.h"
#include "tiny_model_config.h"

namespace deltatune {
namespace {

ModelConfig tiny_gdn() { return testing_tiny::dense(16, 24, {LayerKind::LinearAttention}); }

Tensor host_random(Shape s, std::mt19937& rng) {
  Tensor t = host_tensor(std::move(s), DType::F32);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

std::vector<float> values(Backend& be, const Tensor& t) { return host_to_f32(be.download(t, DType::F32)); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

struct Results {
  std::vector<std::vector<float>> ys, gA, gB;
  std::vector<float> dx;
};

// The GDN in_proj group (qkv, z, b, a) and the MLP gate/up group of one layer, forward and backward.
void run_group(const std::vector<std::string>& leaves, bool grouped, bool dropout, Results& out) {
  const ModelConfig cfg = tiny_gdn();
  auto be = make_cpu_backend(1);
  LoraSpec spec;
  spec.r = 4;
  spec.alpha = 8;
  spec.groups = {"linear_attn", "mlp"};
  if (dropout) spec.dropout = 0.25;
  LoraAdapter adapter = lora_create(cfg, spec, 7);
  lora_to_backend(adapter, *be);
  std::mt19937 rng(3);
  const int64_t T = 9;
  std::vector<LoraModule*> ms;
  std::vector<Tensor> ws, ys, dys;
  for (const std::string& leaf : leaves) {
    LoraModule* m = adapter.find("layers.0." + leaf);
    ASSERT_NE(m, nullptr) << leaf;
    m->B = be->upload(host_random(m->B.shape, rng), DType::F32);  // lora_create's B is zero
    ms.push_back(m);
    ws.push_back(be->upload(host_random({m->out, m->in}, rng), DType::F32));
    ys.push_back(be->alloc({T, m->out}, DType::F32));
    dys.push_back(be->upload(host_random({T, m->out}, rng), DType::F32));
  }
  lora_zero_grad(adapter, *be);
  const Tensor x = be->upload(host_random({T, cfg.hidden_size}, rng), DType::F32);
  Tensor dx = be->alloc({T, cfg.hidden_size}, DType::F32);
  LoraRuntime rt;
  rt.training = true;
  rt.dropout = dropout ? 0.25f : 0.f;
  rt.dropout_seed = 11;
  std::vector<BaseMatrix> bases(ws.begin(), ws.end());
  std::vector<SharedInputModule> sm;
  for (size_t i = 0; i < ms.size(); ++i) sm.push_back({&bases[i], ms[i], 100 + i});
  if (grouped) {
    const LoraComputeCopies copies(*be, &adapter);
    std::vector<Tensor*> yp;
    std::vector<const Tensor*> dyp;
    for (size_t i = 0; i < ms.size(); ++i) {
      yp.push_back(&ys[i]);
      dyp.push_back(&dys[i]);
    }
    LinearGroupCache cache;
    linear_group_fwd(*be, x, sm, rt, yp, cache);
    EXPECT_EQ(cache.u.defined(), !dropout) << "the stacked products ran: " << cache.u.defined();
    linear_group_bwd(*be, dyp, sm, rt, cache, dx, false);
  } else {
    std::vector<LinearCache> caches(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) linear_fwd(*be, x, bases[i], ms[i], rt, sm[i].salt, ys[i], caches[i]);
    for (size_t i = 0; i < ms.size(); ++i)
      linear_bwd(*be, dys[i], bases[i], ms[i], rt, sm[i].salt, caches[i], dx, i > 0);
  }
  for (size_t i = 0; i < ms.size(); ++i) {
    out.ys.push_back(values(*be, ys[i]));
    out.gA.push_back(values(*be, ms[i]->gA));
    out.gB.push_back(values(*be, ms[i]->gB));
  }
  out.dx = values(*be, dx);
}

void expect_same(const std::vector<std::string>& leaves, bool dropout) {
  Results g, e;
  run_group(leaves, true, dropout, g);
  run_group(leaves, false, dropout, e);
  ASSERT_EQ(g.ys.size(), leaves.size());
  ASSERT_EQ(e.ys.size(), leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    EXPECT_LE(max_abs_diff(g.ys[i], e.ys[i]), 1e-5) << leaves[i] << " y";
    EXPECT_LE(max_abs_diff(g.gA[i], e.gA[i]), 1e-4) << leaves[i] << " gA";
    EXPECT_LE(max_abs_diff(g.gB[i], e.gB[i]), 1e-4) << leaves[i] << " gB";
    double norm = 0;
    for (float v : g.gA[i]) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0) << leaves[i] << " gA is all zero";
  }
  EXPECT_LE(max_abs_diff(g.dx, e.dx), 1e-4) << "dx";
}

TEST(LoraGroup, GdnInProjStackedEqualsPerModule) {
  expect_same({"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a"},
              false);
}

TEST(LoraGroup, MlpGateUpStackedEqualsPerModule) { expect_same({"mlp.gate_proj", "mlp.up_proj"}, false); }

TEST(LoraGroup, DropoutRunsPerModule) { expect_same({"mlp.gate_proj", "mlp.up_proj"}, true); }

// lora_to_backend lays out each input-sharing group's gA side by side in share-rank order (inventory order is
// qkv, z, a, b), so linear_group_bwd forms them in one product.
TEST(LoraGroup, GroupGradientsSideBySide) {
  auto be = make_cpu_backend(1);
  LoraSpec spec;
  spec.r = 4;
  spec.groups = {"linear_attn", "mlp"};
  LoraAdapter adapter = lora_create(tiny_gdn(), spec, 7);
  lora_to_backend(adapter, *be);
  for (const std::vector<std::string>& group :
       {std::vector<std::string>{"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"},
        std::vector<std::string>{"gate_proj", "up_proj"}}) {
    const std::string parent = group[0] == "gate_proj" ? "layers.0.mlp." : "layers.0.linear_attn.";
    for (size_t i = 0; i + 1 < group.size(); ++i) {
      const LoraModule* a = adapter.find(parent + group[i]);
      const LoraModule* b = adapter.find(parent + group[i + 1]);
      ASSERT_TRUE(a && b) << group[i];
      EXPECT_EQ(static_cast<const char*>(a->gA.data) + a->gA.nbytes(), static_cast<const char*>(b->gA.data))
          << group[i] << " then " << group[i + 1];
    }
  }
}

TEST(LoraGroup, ShareRanks) {
  LoraModule m;
  m.path = "layers.2.linear_attn.in_proj_b";
  EXPECT_EQ(lora_input_share_rank(m), 2);
  m.path = "layers.0.self_attn.v_proj";
  EXPECT_EQ(lora_input_share_rank(m), 2);
  m.path = "layers.1.mlp.shared_expert.up_proj";
  EXPECT_EQ(lora_input_share_rank(m), 1);
  m.path = "layers.1.mlp.down_proj";
  EXPECT_EQ(lora_input_share_rank(m), -1);
  m.path = "layers.1.self_attn.o_proj";
  EXPECT_EQ(lora_input_share_rank(m), -1);
}

}  // namespace
}  // namespace deltatune
