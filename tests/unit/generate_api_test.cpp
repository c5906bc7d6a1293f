// deltatune/generate.h beyond the HF goldens: sampling rules, stop strings and streaming text, cancel, and the
// messages a user gets for bad input (a prompt longer than the context, an adapter for another base, a run
// without a checkpoint).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/tokenizer.h"
#include "deltatune/experiment_store.h"
#include "deltatune/generate.h"
#include "decode/sampler.h"
#include "decode/text_stream.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

const fs::path kGoldens = fs::path(DT_SOURCE_DIR) / "tests" / "goldens";

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GenerateSampler, GreedyTakesTheLargestLogitLowestIdOnTies) {
  SamplingParams p;
  TokenSampler s(p, {});
  std::vector<float> l{0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(s.next(l), 1);
}

TEST(GenerateSampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 1.2;
  const std::vector<int32_t> prompt{0};
  TokenSampler a(p, prompt);
  std::vector<float> pos{2.f, 1.9f};  // 2 / 1.2 = 1.67 < 1.9
  EXPECT_EQ(a.next(pos), 1);
  TokenSampler b(p, prompt);
  std::vector<float> neg{-1.f, -1.1f};  // -1 * 1.2 = -1.2 < -1.1
  EXPECT_EQ(b.next(neg), 1);
}

TEST(GenerateSampler, TopKOneAndTinyTopPAreGreedyAndSeedsRepeat) {
  std::vector<float> base{0.1f, 0.3f, 0.2f, 0.25f, 0.05f};
  SamplingParams k1;
  k1.temperature = 1.0;
  k1.top_k = 1;
  SamplingParams p0 = k1;
  p0.top_k = 0;
  p0.top_p = 1e-6;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    k1.seed = p0.seed = seed;
    auto l1 = base, l2 = base;
    EXPECT_EQ(TokenSampler(k1, {}).next(l1), 1);
    EXPECT_EQ(TokenSampler(p0, {}).next(l2), 1);
  }
  SamplingParams t;
  t.temperature = 1.0;
  std::vector<int32_t> draws_a, draws_b;
  std::set<int32_t> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    t.seed = seed;
    auto l1 = base, l2 = base;
    draws_a.push_back(TokenSampler(t, {}).next(l1));
    draws_b.push_back(TokenSampler(t, {}).next(l2));
    seen.insert(draws_a.back());
  }
  EXPECT_EQ(draws_a, draws_b);
  EXPECT_EQ(seen.size(), base.size());  // 40 draws of near-uniform probabilities reach every token
}

TEST(GenerateText, StopStringEndsTheTextAndStreamedPiecesAddUp) {
  const Tokenizer tok = Tokenizer::from_file((kGoldens / "tokenizer" / "tiny_qwen.json").string());
  const std::string text = "hello world. STOP and more";
  const auto ids = tok.encode(text);
  TextStream ts(&tok, {"STOP"});
  std::string streamed;
  bool stopped = false;
  for (int32_t id : ids) {
    streamed += ts.push(id, stopped);
    if (stopped) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(ts.text(), "hello world. ");
  EXPECT_EQ(streamed, ts.text());
  TextStream all(&tok, {});
  streamed.clear();
  for (int32_t id : ids) streamed += all.push(id, stopped);
  streamed += all.finish();
  EXPECT_EQ(streamed, text);
}

GeneratorOptions tiny(const std::string& model, const std::string& adapter = "") {
  GeneratorOptions o;
  o.model_dir = (kGoldens / "models" / model).string();
  o.adapter = adapter;
  o.backend = "cpu";
  return o;
}

TEST(GenerateInput, PromptLongerThanTheContextIsNamed) {
  Generator gen(tiny("moe_tied"));
  ASSERT_EQ(gen.context_length(), 4096);
  GenerateRequest r;
  r.prompt_ids.assign(4096, 5);
  const std::string msg = message_of([&] { gen.generate({r}); });
  EXPECT_NE(msg.find("the prompt has 4096 tokens; the model's context is 4096 tokens"), std::string::npos) << msg;
  // One token less fits, and max_new_tokens is cut to the room left.
  r.prompt_ids.assign(4095, 5);
  r.sampling.max_new_tokens = 10;
  r.sampling.ignore_eos = true;
  const auto res = gen.generate({r});
  EXPECT_EQ(res[0].token_ids.size(), 1u);
  EXPECT_EQ(res[0].finish_reason, "length");
}

TEST(GenerateInput, AdapterForAnotherBaseIsRefused) {
  const std::string adapter = (kGoldens / "lora" / "dense_vl" / "adapter").string();
  const std::string msg = message_of([&] { Generator gen(tiny("moe_tied", adapter)); });
  EXPECT_NE(msg.find("does not fit the model"), std::string::npos) << msg;
}

TEST(GenerateInput, RunWithoutCheckpointAndNonAdapterFolderAreNamed) {
  const fs::path tmp = fs::temp_directory_path() / ("dt_generate_runs_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "out");
  const std::string db = (tmp / "runs.db").string();
  std::string id;
  {
    ExperimentStore store(db);
    RunRecord r;
    r.name = "fresh-run";
    r.model = "m";
    r.config_yaml = "base_model: m\n";
    r.output_dir = (tmp / "out").string();
    r.device = "cpu";
    id = store.create_run(r);
  }
  std::string msg = message_of([&] { resolve_adapter("fresh-run", db); });
  EXPECT_NE(msg.find("has no checkpoint yet"), std::string::npos) << msg;
  msg = message_of([&] { resolve_adapter("no-such-run", db); });
  EXPECT_NE(msg.find("no adapter folder and no run 'no-such-run'"), std::string::npos) << msg;
  msg = message_of([&] { resolve_adapter((tmp / "out").string(), db); });
  EXPECT_NE(msg.find("not a PEFT adapter folder"), std::string::npos) << msg;
  // A run that finished wrote its adapter into its output folder: the run resolves to it.
  fs::copy(kGoldens / "lora" / "moe_tied" / "adapter", tmp / "out", fs::copy_options::recursive);
  ExperimentStore(db).set_status(id, "finished");
  EXPECT_EQ(resolve_adapter(id, db), (tmp / "out").string());
  fs::remove_all(tmp);
}

TEST(GenerateInput, MessagesNeedATokenizer) {
  Generator gen(tiny("dense_vl"));
  GenerateRequest r;
  r.messages = {{"user", "hi"}};
  const std::string msg = message_of([&] { gen.generate({r}); });
  EXPECT_NE(msg.find("no tokenizer.json"), std::string::npos) << msg;
}

TEST(GenerateInput, CancelEndsEveryRequest) {
  Generator gen(tiny("moe_tied"));
  std::vector<GenerateRequest> reqs(2);
  reqs[0].prompt_ids = {5, 6, 7};
  reqs[1].prompt_ids = {8, 9};
  for (auto& r : reqs) r.sampling.ignore_eos = true;
  std::atomic<bool> cancel{false};
  int events = 0;
  const auto res = gen.generate(reqs, [&](const GenerateEvent& e) {
    ++events;
    if (e.request == 1 && !e.finished) cancel = true;  // after the first token
  }, &cancel);
  for (const auto& r : res) {
    EXPECT_EQ(r.finish_reason, "cancelled");
    EXPECT_EQ(r.token_ids.size(), 1u);
  }
  EXPECT_EQ(events, 4);  // a token and a "cancelled" event per request
}

}  // namespace
}  // namespace deltatune
