// Selective recompute (StepOptions::keep): a checkpointed layer that keeps its attention core, GDN core or
// MLP gate/up outputs from the first forward and skips forming them in the recompute computes the same loss
// and LoRA gradients, bit for bit, as plain checkpointing (the kept tensors are the numbers the recompute
// would form). RecomputeKeep::inputs_on_host on the CPU backend (no activation stash) changes nothing either.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "../golden_files.h"
#include "backend/activation_stash.h"
#include "backend/backend.h"
#include "model/qwen35_model.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

TEST(ModelRecomputeKeep, SameLossAndGradientsAsPlainCheckpointing) {
  const std::string missing = testing_goldens::for_each_cpu_lora_golden(
      {"dense_vl", "moe_tied"},
      [](const std::string& name, testing_goldens::GoldenLoraModel& g, Backend& be, const fs::path& mdir) {
        Qwen35Model& model = g.model;
        LoraAdapter& adapter = g.adapter;
        const int64_t L = model.config().num_layers;
        EXPECT_EQ(make_activation_stash(be), nullptr) << "the CPU backend keeps no activations in host memory";
        ASSERT_GE(L, 2);
        const auto seqs = testing_goldens::read_jsonl(mdir / "golden_eval.jsonl");
        for (const int64_t n : {int64_t(-1), L - 1}) {  // every layer checkpointed; all but the last
          StepOptions plain;
          plain.gradient_checkpointing = true;
          plain.checkpoint_layers = n;
          const double loss0 = testing_goldens::lora_golden_step(model, be, adapter, seqs, plain);
          const std::vector<float> g0 = testing_goldens::all_lora_grads(adapter, be);
          ASSERT_GT(testing_goldens::max_abs(g0), 0.0);
          RecomputeKeep all, attn_mlp1, gdn, host;
          all.attn_core = all.gdn_core = true;
          all.mlp_layers = -1;
          attn_mlp1.attn_core = true;
          attn_mlp1.mlp_layers = 1;
          gdn.gdn_core = true;
          host.inputs_on_host = true;  // the CPU backend has no stash: the inputs stay where they are
          host.mlp_host_every = 2;
          for (const RecomputeKeep& keep : {all, attn_mlp1, gdn, host}) {
            StepOptions so = plain;
            so.keep = keep;
            const double loss = testing_goldens::lora_golden_step(model, be, adapter, seqs, so);
            const std::string what = std::string(name) + " checkpoint_layers " + std::to_string(n) +
                                     " keep attn " + std::to_string(keep.attn_core) + " gdn " +
                                     std::to_string(keep.gdn_core) + " mlp " +
                                     std::to_string(keep.mlp_layers) + " inputs on host " +
                                     std::to_string(keep.inputs_on_host);
            EXPECT_EQ(loss, loss0) << what;
            const std::vector<float> g1 = testing_goldens::all_lora_grads(adapter, be);
            ASSERT_EQ(g1.size(), g0.size());
            EXPECT_EQ(testing_goldens::max_abs_diff(g1, g0), 0.0) << what;
          }
        }
      });
  if (!missing.empty()) GTEST_SKIP() << "no goldens for " << missing;
}

}  // namespace
}  // namespace deltatune
