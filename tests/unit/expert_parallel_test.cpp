// Expert parallel in the model (model/expert_parallel.h) on the CPU backend: the moe_tied LoRA golden (4 experts,
// top-2, LoRA on every group including the experts) with its experts split over 2 and 4 ranks (threads of this
// process exchanging token rows through InProcessExchangeGroup), each rank training its own micro-batch, against
// the unsplit model training the same micro-batches (tests/expert_parallel_golden.h). The CPU backend computes
// every row of an expert alike wherever it runs; only the order in which gradient contributions are added
// differs (a rank's sum over its rows, then the sum over the ranks), hence 1e-5 norm-relative on the gradients
// and 1e-9 on the loss. With gradient checkpointing the recompute exchanges again.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "../expert_parallel_golden.h"
#include "../golden_files.h"
#include "dist/expert_exchange.h"
#include "lora/peft_io.h"
#include "model/weights.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using namespace testing_goldens;

class ExpertParallelModel : public ::testing::TestWithParam<bool> {};

TEST_P(ExpertParallelModel, RanksGiveTheUnsplitLossLoraGradientsAndRouterLoads) {
  const fs::path gdir = goldens_dir() / "lora" / "moe_tied", mdir = goldens_dir() / "models" / "moe_tied";
  if (!fs::exists(gdir) || !fs::exists(mdir)) GTEST_SKIP() << "no moe_tied goldens";
  const ModelWeights w = model_weights_load(mdir.string());
  const LoraAdapter adapter = peft_adapter_read((gdir / "adapter").string(), w.config);
  ASSERT_TRUE(adapter.find("layers.0.mlp.experts.gate_up_proj") != nullptr);
  const auto seqs = read_jsonl(mdir / "golden_eval.jsonl");
  StepOptions so;
  so.gradient_checkpointing = GetParam();
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::vector<Batch> batches = ep_rank_batches(seqs, world);
    auto ref_be = make_cpu_backend(1);
    const EpRun ref = ep_run(*ref_be, w, adapter, batches, nullptr, so);
    ASSERT_EQ(ref.error, "");
    InProcessExchangeGroup group(world);
    std::vector<EpRun> ranks(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        auto be = make_cpu_backend(1);
        ranks[static_cast<size_t>(r)] = ep_run(*be, w, adapter, batches, &group.rank(r), so);
      });
    for (auto& t : threads) t.join();
    const EpErrors e = ep_compare(ranks, ref);
    ASSERT_EQ(e.error, "");
    std::printf("[expert parallel, %d ranks] loss rel %.2e, LoRA grads max norm-rel %.2e (%s), loads %s\n", world,
                e.loss_rel, e.grad_rel, e.worst.c_str(), e.load_equal ? "equal" : "differ");
    EXPECT_LE(e.loss_rel, 1e-9);
    EXPECT_LE(e.grad_rel, 1e-5) << e.worst;
    EXPECT_TRUE(e.load_equal);
    // Each rank holds E/N experts' LoRA.
    for (const EpRun& r : ranks)
      for (size_t m = 0; m < r.grads.size(); ++m)
        if (is_expert_lora(ref.grads[m])) EXPECT_EQ(r.grads[m].experts * world, ref.grads[m].experts);
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, ExpertParallelModel, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "checkpointed" : "kept"); });

}  // namespace
}  // namespace deltatune
