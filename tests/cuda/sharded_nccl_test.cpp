// Sharded frozen weights over 2 and 4 GPUs (NCCL all-gather, backend/cuda/nccl_gatherer.cpp) against the unsharded
// model on one GPU, on the dense and the MoE LoRA goldens: each rank (a thread driving its own GPU and backend)
// must give the one-GPU loss and LoRA gradients. The gathered weights are the same bytes and the kernels the
// same, so any difference comes only from run-to-run nondeterminism of the kernels (atomics); tolerances:
//   fp32 compute: loss 1e-6 relative, each gradient 1e-5 norm-relative;
//   bf16 compute: loss 1e-3 relative, each gradient 1e-2 norm-relative (bf16 rounding of a reordered sum is
//   ~4e-3 of one element; a wrong or missing shard moves the loss and gradients by far more).
// Needs N GPUs and an NCCL build; skips otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "../golden_files.h"
#include "deltatune/distributed.h"
#include "lora/peft_io.h"
#include "model/sharded_layers.h"
#include "model/weights.h"
#include "in_process_share.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using testing_goldens::goldens_dir;

using test::InProcessShare;

struct RankResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  size_t resident = 0, layer_bytes = 0, peak = 0;
  std::string error;
};

RankResult run_rank(const ModelWeights& w, const fs::path& gdir, const std::vector<Example>& seqs, DType dt,
                    int device, int rank, int world, InProcessShare* share) {
  RankResult r;
  try {
    auto be = make_cuda_backend(device, dt);
    std::unique_ptr<ShardGatherer> gatherer;
    if (share) {
      ReducerSetup s;
      s.rank = rank;
      s.world = world;
      s.share_from_rank0 = [share, rank](const std::string& bytes) { return share->share(rank, bytes); };
      s.timeout_s = 120;
      gatherer = be->create_shard_gatherer(s);
      if (!gatherer) throw Error("this build has no NCCL");
    }
    {
      Qwen35Model model(w, *be, gatherer.get());
      LoraAdapter adapter = peft_adapter_read((gdir / "adapter").string(), w.config);
      lora_to_backend(adapter, *be);
      StepOptions so;
      r.loss = testing_goldens::lora_golden_step(model, *be, adapter, seqs, so);
      for (const LoraModule& m : adapter.modules)
        for (const Tensor* g : {&m.gA, &m.gB}) r.grads.push_back(host_to_f32(be->download(*g, DType::F32)));
      if (const ShardedLayers* sl = model.sharded_layers()) {
        r.resident = sl->store().resident_bytes();
        r.peak = sl->store().gathered_peak();
        for (size_t i = 0; i < sl->store().units(); ++i) r.layer_bytes += sl->store().unit_bytes(i);
      }
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

double norm_rel(const std::vector<float>& got, const std::vector<float>& ref) {
  double ref2 = 0, err2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    ref2 += double(ref[i]) * ref[i];
    err2 += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
  }
  return std::sqrt(err2 / std::max(ref2, 1e-30));
}

// (golden, fp32 compute, GPUs)
class ShardedGpus : public ::testing::TestWithParam<std::tuple<std::string, bool, int>> {};

TEST_P(ShardedGpus, EachRankGivesTheOneGpuLossAndLoraGradients) {
  const auto [name, fp32, world] = GetParam();
  if (!cuda_backend_available() || visible_cuda_devices() < world)
    GTEST_SKIP() << "needs " << world << " GPUs";
  const fs::path gdir = goldens_dir() / "lora" / name, mdir = goldens_dir() / "models" / name;
  if (!fs::exists(gdir) || !fs::exists(mdir)) GTEST_SKIP() << "no goldens for " << name;
  const ModelWeights w = model_weights_load(mdir.string());
  const auto seqs = testing_goldens::read_jsonl(mdir / "golden_eval.jsonl");
  const DType dt = fp32 ? DType::F32 : DType::BF16;
  const RankResult ref = run_rank(w, gdir, seqs, dt, 0, 0, 1, nullptr);
  ASSERT_EQ(ref.error, "");

  InProcessShare share;
  std::vector<RankResult> ranks(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { ranks[static_cast<size_t>(r)] = run_rank(w, gdir, seqs, dt, r, r, world, &share); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    const RankResult& got = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(got.error, "") << "rank " << r;
    const double dl = std::fabs(got.loss - ref.loss) / std::fabs(ref.loss);
    double worst = 0;
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    for (size_t g = 0; g < ref.grads.size(); ++g) worst = std::max(worst, norm_rel(got.grads[g], ref.grads[g]));
    std::printf("[sharded %d GPUs] %-9s %s rank %d: loss 1 GPU %.7f sharded %.7f (rel %.2e); %zu grads, worst "
                "norm-rel %.2e; resident %zu of %zu layer bytes, peak %zu gathered layers\n",
                world, name.c_str(), fp32 ? "fp32" : "bf16", r, ref.loss, got.loss, dl, ref.grads.size(), worst, got.resident,
                got.layer_bytes, got.peak);
    EXPECT_LE(dl, fp32 ? 1e-6 : 1e-3) << "rank " << r;
    EXPECT_LE(worst, fp32 ? 1e-5 : 1e-2) << "rank " << r;
    EXPECT_LE(got.resident, got.layer_bytes / static_cast<size_t>(world) + 256 * w.layers.size());
    EXPECT_LE(got.peak, 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, ShardedGpus,
                         ::testing::Combine(::testing::Values("dense_vl", "moe_tied"), ::testing::Bool(),
                                            ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_fp32_" : "_bf16_") +
                                  std::to_string(std::get<2>(info.param)) + "gpus";
                         });

}  // namespace
}  // namespace deltatune
