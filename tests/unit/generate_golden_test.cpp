// Greedy generation on the CPU backend against Hugging Face `generate` (fp32, CPU; tests/goldens/generate):
// token for token for 64 new tokens (or up to HF's eos), dense and MoE, with and without a PEFT adapter, the
// prompts of a case generated together as one batch.
#include <gtest/gtest.h>

#include "../generate_goldens.h"
#include "deltatune/generate.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kGoldens = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";

TEST(GenerateGolden, GreedyMatchesHFGenerate) {
  int64_t max_new = 0;
  const auto cases = testing_goldens::read_generate_goldens(kGoldens, &max_new);
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    GeneratorOptions o;
    o.model_dir = c.model_dir;
    o.adapter = c.adapter_dir;
    o.backend = "cpu";
    Generator gen(o);
    EXPECT_EQ(gen.has_adapter(), !c.adapter_dir.empty());
    std::vector<GenerateRequest> reqs;
    for (const auto& p : c.prompts) {
      GenerateRequest r;
      r.prompt_ids = p;
      r.sampling.max_new_tokens = max_new;
      reqs.push_back(r);
    }
    const auto res = gen.generate(reqs);
    ASSERT_EQ(res.size(), c.prompts.size());
    for (size_t i = 0; i < res.size(); ++i) {
      const int64_t d = testing_goldens::first_divergence(res[i].token_ids, c.outputs[i]);
      EXPECT_EQ(d, -1) << c.name << " prompt " << i << ": first different token at step " << d << " of "
                       << c.outputs[i].size() << " (HF's top-2 gap there "
                       << (d >= 0 && d < int64_t(c.top2_gaps[i].size()) ? c.top2_gaps[i][d] : -1.0) << ")";
      const bool hf_hit_eos = static_cast<int64_t>(c.outputs[i].size()) < max_new;
      EXPECT_EQ(res[i].finish_reason, hf_hit_eos ? "stop" : "length") << c.name << " prompt " << i;
      EXPECT_EQ(res[i].prompt_tokens, static_cast<int64_t>(c.prompts[i].size()));
    }
  }
}

// One generate() with base and adapter requests mixed answers each as a call of its own would: the adapter is
// switched per request on one copy of the weights.
TEST(GenerateGolden, BaseAndAdapterRequestsInOneCall) {
  int64_t max_new = 0;
  const auto cases = testing_goldens::read_generate_goldens(kGoldens, &max_new);
  const testing_goldens::GenerateCase *base = nullptr, *lora = nullptr;
  for (const auto& c : cases) {
    if (c.name == "moe_tied") base = &c;
    if (c.name == "moe_tied_lora") lora = &c;
  }
  ASSERT_TRUE(base && lora);
  GeneratorOptions o;
  o.model_dir = lora->model_dir;
  o.adapter = lora->adapter_dir;
  o.backend = "cpu";
  Generator gen(o);
  std::vector<GenerateRequest> reqs(2);
  reqs[0].prompt_ids = base->prompts[1];
  reqs[0].use_adapter = false;
  reqs[1].prompt_ids = lora->prompts[1];
  for (auto& r : reqs) r.sampling.max_new_tokens = 16;
  std::vector<int32_t> streamed0;
  const auto res = gen.generate(reqs, [&](const GenerateEvent& e) {
    if (e.request == 0) streamed0.push_back(e.token);
  });
  const std::vector<int32_t> want0(base->outputs[1].begin(), base->outputs[1].begin() + 16);
  const std::vector<int32_t> want1(lora->outputs[1].begin(), lora->outputs[1].begin() + 16);
  EXPECT_EQ(res[0].token_ids, want0);
  EXPECT_EQ(res[1].token_ids, want1);
  EXPECT_EQ(streamed0, want0);  // one event per token, in order
  EXPECT_EQ(res[0].finish_reason, "length");
}

}  // namespace
}  // namespace deltatune
