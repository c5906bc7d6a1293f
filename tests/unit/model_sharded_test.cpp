// Sharded frozen weights in the model (ZeRO-3 style, model/sharded_layers.h): the dense and the MoE LoRA goldens
// run with the decoder layers sharded over 2 and 4 ranks (threads of this process, a CPU backend each, gathering
// through InProcessShardGroup). Every rank must give the unsharded model's loss and LoRA gradients bit for bit
// (the gathered weights are the same bytes and the CPU backend computes in a fixed order), hence also the HF +
// PEFT goldens within the unsharded model's tolerance (1e-4 relative, model_golden_test.cpp), while each rank
// keeps about 1/N of the layers' bytes and holds at most two gathered layers at a time.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "../golden_files.h"
#include "dist/shard_gatherers.h"
#include "lora/peft_io.h"
#include "model/sharded_layers.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kGoldens = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";

struct RankResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // gA, gB of every module in adapter order
  std::vector<testing_goldens::GradError> vs_hf;
  size_t resident = 0, peak = 0, layer_bytes = 0;
  std::string error;
};

RankResult run_rank(const ModelWeights& w, const fs::path& gdir, const std::vector<Example>& seqs,
                    const StepOptions& so, ShardGatherer* shard) {
  RankResult r;
  try {
    auto be = make_cpu_backend(1);
    Qwen35Model model(w, *be, shard);
    LoraAdapter adapter = peft_adapter_read((gdir / "adapter").string(), w.config);
    lora_to_backend(adapter, *be);
    r.loss = testing_goldens::lora_golden_step(model, *be, adapter, seqs, so);
    for (const LoraModule& m : adapter.modules)
      for (const Tensor* g : {&m.gA, &m.gB}) r.grads.push_back(host_to_f32(be->download(*g, DType::F32)));
    r.vs_hf = testing_goldens::lora_grad_errors(*be, adapter, gdir / "grads.safetensors");
    if (const ShardedLayers* s = model.sharded_layers()) {
      r.resident = s->store().resident_bytes();
      r.peak = s->store().gathered_peak();
      for (size_t i = 0; i < s->store().units(); ++i) r.layer_bytes += s->store().unit_bytes(i);
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

struct Case {
  std::string golden;
  bool checkpointing;
};

class ModelSharded : public ::testing::TestWithParam<Case> {};

TEST_P(ModelSharded, EveryRankGivesTheUnshardedLossAndLoraGradients) {
  const Case c = GetParam();
  const fs::path gdir = kGoldens / "lora" / c.golden, mdir = kGoldens / "models" / c.golden;
  if (!fs::exists(gdir) || !fs::exists(mdir)) GTEST_SKIP() << "no goldens for " << c.golden;
  const ModelWeights w = model_weights_load(mdir.string());
  const auto seqs = testing_goldens::read_jsonl(mdir / "golden_eval.jsonl");
  const double hf_loss = testing_goldens::read_json(gdir / "golden.json")["loss"].get<double>();
  StepOptions so;
  so.gradient_checkpointing = c.checkpointing;
  const RankResult ref = run_rank(w, gdir, seqs, so, nullptr);
  ASSERT_EQ(ref.error, "");
  ASSERT_NEAR(ref.loss, hf_loss, 1e-4 * hf_loss);

  for (int world : {2, 4}) {
    InProcessShardGroup group(world);
    std::vector<RankResult> ranks(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] { ranks[static_cast<size_t>(r)] = run_rank(w, gdir, seqs, so, &group.rank(r)); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      const RankResult& got = ranks[static_cast<size_t>(r)];
      SCOPED_TRACE(c.golden + " world " + std::to_string(world) + " rank " + std::to_string(r));
      ASSERT_EQ(got.error, "");
      EXPECT_EQ(got.loss, ref.loss);
      ASSERT_EQ(got.grads.size(), ref.grads.size());
      for (size_t g = 0; g < ref.grads.size(); ++g) EXPECT_EQ(got.grads[g], ref.grads[g]) << "gradient " << g;
      for (const auto& e : got.vs_hf) EXPECT_LE(e.rel, 1e-4) << e.name;
      // 1/N of every layer, each rounded up to 256 bytes per rank.
      EXPECT_LE(got.resident, got.layer_bytes / static_cast<size_t>(world) + 256 * w.layers.size());
      EXPECT_GE(got.resident * static_cast<size_t>(world), got.layer_bytes);
      EXPECT_LE(got.peak, 2u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, ModelSharded,
                         ::testing::Values(Case{"dense_vl", false}, Case{"moe_tied", false},
                                           Case{"moe_tied", true}),
                         [](const auto& info) {
                           return info.param.golden + (info.param.checkpointing ? "_checkpointed" : "");
                         });

}  // namespace
}  // namespace deltatune
