// Expert parallel forward of the routed experts (model/expert_parallel.h) on the CPU backend, ranks as threads
// exchanging token rows through InProcessExchangeGroup: every rank's output equals the routed-expert output
// computed with all experts on that rank (moe_block_fwd's ops without the exchange), bit for bit, since each
// row's expert computation does not depend on the other rows.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "dist/expert_exchange.h"
#include "model/expert_parallel.h"

namespace deltatune {
namespace {

Tensor random_host(Shape s, std::mt19937& rng, float scale) {
  Tensor t = host_tensor(std::move(s), DType::F32);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

// All experts on one rank: dispatch, grouped SwiGLU, combine.
Tensor routed_reference(Backend& be, const ModelConfig& cfg, const Tensor& x, const Tensor& idx, const Tensor& w,
                        const Tensor& gate_up, const Tensor& down) {
  const int64_t T = x.rows(), H = cfg.hidden_size, E = cfg.num_experts, M = T * cfg.top_k, Ie = cfg.moe_intermediate;
  Tensor off = be.alloc({E + 1}, DType::I32), rt = be.alloc({M}, DType::I32), rs = be.alloc({M}, DType::I32),
         sr = be.alloc({M}, DType::I32);
  be.moe_dispatch(idx, static_cast<int>(E), off, rt, rs, sr, nullptr);
  Tensor xe = be.alloc({M, H}, DType::F32), gu = be.alloc({M, 2 * Ie}, DType::F32);
  be.gather_rows(x, rt, xe);
  be.grouped_gemm(xe, gate_up, true, off, gu, 1.f, 0.f);
  Tensor g = be.alloc({M, Ie}, DType::F32), u = be.alloc({M, Ie}, DType::F32), h = be.alloc({M, Ie}, DType::F32);
  be.copy_cols(g, 0, gu, 0, Ie);
  be.copy_cols(u, 0, gu, Ie, Ie);
  be.swiglu_fwd(g, u, h);
  Tensor ye = be.alloc({M, H}, DType::F32), out = be.alloc({T, H}, DType::F32);
  be.grouped_gemm(h, down, true, off, ye, 1.f, 0.f);
  be.moe_combine(ye, sr, w, out);
  return out;
}

TEST(ExpertParallel, EveryRankGetsTheAllExpertsOutput) {
  ModelConfig cfg;
  cfg.hidden_size = 16;
  cfg.num_experts = 8;
  cfg.top_k = 2;
  cfg.moe_intermediate = 12;
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, Ie = cfg.moe_intermediate;
  std::mt19937 rng(5);
  const Tensor gate_up = random_host({E, 2 * Ie, H}, rng, 0.3f), down = random_host({E, H, Ie}, rng, 0.3f);
  for (int world : {2, 4}) {
    std::vector<Tensor> xs, logits;
    for (int r = 0; r < world; ++r) {
      const int64_t T = 3 + static_cast<int64_t>(rng() % 9);  // ranks with different token counts
      xs.push_back(random_host({T, H}, rng, 1.f));
      logits.push_back(random_host({T, E}, rng, 2.f));
    }
    InProcessExchangeGroup group(world);
    std::vector<std::string> failures(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto be = make_cpu_backend(1);
          const int64_t T = xs[r].rows(), per = E / world;
          Tensor x = be->upload(xs[r], DType::F32), lg = be->upload(logits[r], DType::F32);
          Tensor idx = be->alloc({T, cfg.top_k}, DType::I32), w = be->alloc({T, cfg.top_k}, DType::F32);
          be->moe_router_fwd(lg, static_cast<int>(cfg.top_k), idx, w);
          const Tensor gu_all = be->upload(gate_up, DType::F32), dn_all = be->upload(down, DType::F32);
          const Tensor want = be->download(routed_reference(*be, cfg, x, idx, w, gu_all, dn_all), DType::F32);
          const Tensor gu_mine = gu_all.slice(r * per, (r + 1) * per), dn_mine = dn_all.slice(r * per, (r + 1) * per);
          const Tensor got = be->download(
              expert_parallel_fwd(*be, group.rank(r), cfg, x, idx, w, gu_mine, dn_mine), DType::F32);
          for (int64_t i = 0; i < want.numel(); ++i)
            if (got.ptr<float>()[i] != want.ptr<float>()[i]) {
              failures[r] = "element " + std::to_string(i) + ": " + std::to_string(got.ptr<float>()[i]) + " vs " +
                            std::to_string(want.ptr<float>()[i]);
              break;
            }
        } catch (const std::exception& e) {
          failures[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], "") << "world " << world << " rank " << r;
  }
}

}  // namespace
}  // namespace deltatune
