// Expert parallel over 2 and 4 GPUs (NCCL send/recv, backend/cuda/nccl_exchange.cpp) against one GPU: the moe_tied
// LoRA golden (tests/expert_parallel_golden.h) with its 4 experts split over N ranks (a thread driving each GPU),
// each rank training its own micro-batch, vs GPU 0 training both micro-batches with every expert. The grouped
// GEMMs see other row counts per call (an expert's rows of both ranks form one group) and the gradient sums
// are added in another order, so the results agree within the compute dtype's rounding: fp32 loss 1e-6 and
// LoRA gradients 1e-4 norm-relative (router loads equal); bf16 loss 2e-3 and gradients 3e-2 (a bf16 rounding
// difference can flip a near-tie top-k choice, which moves whole rows: the loads are printed, not required).
// Needs N GPUs and an NCCL build; skips otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "../expert_parallel_golden.h"
#include "../golden_files.h"
#include "deltatune/distributed.h"
#include "lora/peft_io.h"
#include "model/weights.h"
#include "in_process_share.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using namespace testing_goldens;

using test::InProcessShare;

// (fp32 compute, GPUs)
class ExpertParallelGpus : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ExpertParallelGpus, GivesTheOneGpuLossAndLoraGradients) {
  const auto [fp32, world] = GetParam();
  if (!cuda_backend_available() || visible_cuda_devices() < world)
    GTEST_SKIP() << "needs " << world << " GPUs";
  const fs::path gdir = goldens_dir() / "lora" / "moe_tied", mdir = goldens_dir() / "models" / "moe_tied";
  if (!fs::exists(gdir) || !fs::exists(mdir)) GTEST_SKIP() << "no moe_tied goldens";
  const DType dt = fp32 ? DType::F32 : DType::BF16;
  const ModelWeights w = model_weights_load(mdir.string());
  const LoraAdapter adapter = peft_adapter_read((gdir / "adapter").string(), w.config);
  const std::vector<Batch> batches = ep_rank_batches(read_jsonl(mdir / "golden_eval.jsonl"), world);
  EpRun ref;
  {
    auto be = make_cuda_backend(0, dt);
    ref = ep_run(*be, w, adapter, batches, nullptr, StepOptions{});
  }
  ASSERT_EQ(ref.error, "");
  InProcessShare share;
  std::vector<EpRun> ranks(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto be = make_cuda_backend(r, dt);
        ReducerSetup s;
        s.rank = r;
        s.world = world;
        s.share_from_rank0 = [&share, r](const std::string& b) { return share.share(r, b); };
        s.timeout_s = 120;
        auto ex = be->create_token_exchange(s);
        if (!ex) throw Error("this build has no NCCL");
        ranks[static_cast<size_t>(r)] = ep_run(*be, w, adapter, batches, ex.get(), StepOptions{});
      } catch (const std::exception& e) {
        ranks[static_cast<size_t>(r)].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const EpErrors e = ep_compare(ranks, ref);
  ASSERT_EQ(e.error, "");
  double loss = 0;
  for (const EpRun& r : ranks) loss += r.loss_sum;
  std::printf("[expert parallel %d GPUs] %s: loss %.7f vs 1 GPU %.7f (rel %.2e), LoRA grads max norm-rel %.2e (%s), "
              "router loads %s\n",
              world, fp32 ? "fp32" : "bf16", loss, ref.loss_sum, e.loss_rel, e.grad_rel, e.worst.c_str(),
              e.load_equal ? "equal" : "differ");
  EXPECT_LE(e.loss_rel, fp32 ? 1e-6 : 2e-3);
  EXPECT_LE(e.grad_rel, fp32 ? 1e-4 : 3e-2) << e.worst;
  if (fp32) EXPECT_TRUE(e.load_equal);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndGpus, ExpertParallelGpus, ::testing::Combine(::testing::Bool(), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "fp32_" : "bf16_") +
                                  std::to_string(std::get<1>(info.param)) + "gpus";
                         });

}  // namespace
}  // namespace deltatune
