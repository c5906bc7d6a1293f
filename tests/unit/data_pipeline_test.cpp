// Dataset formats, bad rows, validation split, truncation, packing, shuffling and the token cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/packing.h"
#include "data/pipeline.h"
#include "data/token_cache.h"
#include "data/tokenizer.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

class DataPipeline : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::path(DT_BINARY_DIR) / "test_tmp" /
          ("data_pipeline_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir / "model");
    fs::copy_file(fs::path(DT_SOURCE_DIR) / "tests/goldens/tokenizer/tiny_qwen.json",
                  dir / "model/tokenizer.json");
    write_template();
  }
  void TearDown() override { fs::remove_all(dir); }
  // The model's tokenizer_config.json: a ChatML template with `extra` after the messages.
  void write_template(const std::string& extra = "") {
    nlohmann::json cfg;
    cfg["eos_token"] = "<|im_end|>";
    cfg["chat_template"] =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}" +
        extra + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    write("model/tokenizer_config.json", cfg.dump());
  }
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return (dir / name).string();
  }
  RunConfig config(std::vector<DatasetSpec> ds) {
    RunConfig c;
    c.base_model = (dir / "model").string();
    c.datasets = std::move(ds);
    c.sequence_len = 64;
    c.dataset_prepared_path = (dir / "cache").string();
    return c;
  }
};

TEST_F(DataPipeline, ReadsEveryFormat) {
  const auto chat = write(
      "chat.jsonl",
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]})"
      "\n\n"
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})"
      "\n");
  const auto share = write("share.json", R"([
  {"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"yo"}]},
  {"conversations":[{"from":"system","value":"s"},{"from":"human","value":"q"},{"from":"gpt","value":"a"}]}
])");
  const auto alpaca = write("alpaca.jsonl", R"({"instruction":"Do X","input":"data","output":"done"})"
                                            "\n"
                                            R"({"instruction":"Do Y","input":"","output":"ok"})");
  const auto text = write("text.jsonl", R"({"text":"hello world"})");
  const auto pre = write("pre.jsonl", R"({"input_ids":[5,6,7],"labels":[-100,6,7]})"
                                      "\n"
                                      R"({"input_ids":[8,9]})");
  EXPECT_EQ(dataset_read(chat, "", false).format, "chat");
  EXPECT_EQ(dataset_read(share, "", false).format, "sharegpt");
  EXPECT_EQ(dataset_read(alpaca, "", false).format, "alpaca");
  EXPECT_EQ(dataset_read(text, "", false).format, "completion");
  EXPECT_EQ(dataset_read(pre, "", false).format, "pretokenized");

  const auto a = dataset_read(alpaca, "", false);
  ASSERT_EQ(a.rows.size(), 2u);
  EXPECT_EQ(a.rows[0].messages[0]["content"], "Do X\n\ndata");
  EXPECT_EQ(a.rows[1].messages[0]["content"], "Do Y");
  EXPECT_EQ(a.rows[0].messages[1]["role"], "assistant");
  const auto s = dataset_read(share, "", false);
  EXPECT_EQ(s.rows[1].messages[0]["role"], "system");
  EXPECT_EQ(s.rows[1].source, share + ":3");
  EXPECT_EQ(dataset_read(chat, "", false).rows[1].source, chat + ":3");

  const auto data = data_prepare(
      config({{chat, "", ""}, {share, "sharegpt", ""}, {alpaca, "", ""}, {text, "", ""}, {pre, "", ""}}));
  EXPECT_EQ(data.train.size(), 2u + 2 + 2 + 1 + 2);
  EXPECT_EQ(data.datasets.size(), 5u);
  const auto tok = Tokenizer::from_file((dir / "model").string());
  const int32_t eos = tok.token_to_id("<|im_end|>");
  EXPECT_EQ(data.eos_id, eos);
  // Completion: ids + EOS, all trained.
  const Example& comp = data.train[6];
  EXPECT_EQ(comp.input_ids.back(), eos);
  EXPECT_EQ(comp.labels, comp.input_ids);
  EXPECT_EQ(tok.decode(comp.input_ids), "hello world<|im_end|>");
  // Pre-tokenized: kept as given; no labels = all trained.
  EXPECT_EQ(data.train[7].input_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(data.train[7].labels, (std::vector<int32_t>{-100, 6, 7}));
  EXPECT_EQ(data.train[8].labels, (std::vector<int32_t>{8, 9}));
  // Chat: only "yo<|im_end|>" trained.
  std::string trained;
  for (size_t i = 0; i < data.train[0].labels.size(); ++i)
    if (data.train[0].labels[i] != -100) trained += tok.decode({data.train[0].input_ids[i]});
  EXPECT_EQ(trained, "yo<|im_end|>");
  EXPECT_GT(data.train_stats.trained_tokens, 0);
  EXPECT_LT(data.train_stats.trained_tokens, data.train_stats.tokens);
}

TEST_F(DataPipeline, ByteOrderMarkAndPreview) {
  const auto path = write("bom.json",
                          "\xEF\xBB\xBF[\n {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                          " {\"role\": \"assistant\", \"content\": \"Yo\"}]}\n]\n");
  const auto file = dataset_read(path, "", false);
  ASSERT_EQ(file.rows.size(), 1u);
  EXPECT_EQ(file.rows[0].source, path + ":2");
  const auto tok = Tokenizer::from_file((dir / "model").string());
  const auto tpl = ChatTemplate::from_model_dir((dir / "model").string());
  const auto r = render_preview(tok, &tpl, file.rows[0], false, 0, tok.token_to_id("<|im_end|>"));
  EXPECT_EQ(r.text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n");
  ASSERT_EQ(r.pieces.size(), r.ids.size());
  std::string joined, trained;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    joined += r.pieces[i];
    if (r.labels[i] != -100) trained += r.pieces[i];
    EXPECT_EQ(r.text.substr(static_cast<size_t>(r.token_starts[i]),
                            static_cast<size_t>(r.token_ends[i] - r.token_starts[i])),
              r.pieces[i]);
  }
  EXPECT_EQ(joined, r.text);
  EXPECT_EQ(trained, "Yo<|im_end|>");
  const auto cut = render_preview(tok, &tpl, file.rows[0], false, 5, tok.token_to_id("<|im_end|>"));
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.ids.size(), 5u);
}

TEST_F(DataPipeline, BrokenChatTemplateIsReported) {
  nlohmann::json cfg;
  cfg["chat_template"] = "line one\n{% if messages %}unclosed";
  write("model/tokenizer_config.json", cfg.dump());
  const auto path =
      write("c.jsonl", R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]})");
  try {
    data_prepare(config({{path, "", ""}}));
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("endif"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.jsonl"), std::string::npos) << e.what();
  }
  // Completion data does not need the template.
  EXPECT_EQ(data_prepare(config({{write("t.jsonl", R"({"text":"x"})"), "", ""}})).train.size(), 1u);
}

TEST_F(DataPipeline, BadRowsNameFileAndLine) {
  struct Case {
    std::string good, content, type, needle;
  };
  const std::string text = R"({"text":"fine"})";
  const std::string chat =
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]})";
  const std::string share = R"({"conversations":[{"from":"human","value":"q"}]})";
  const std::string pre = R"({"input_ids":[1,2]})";
  const std::string alp = R"({"instruction":"i","output":"o"})";
  const std::vector<Case> cases = {
      {text, "{\"messages\": [}", "", "malformed JSON"},
      {text, R"({"text": 5})", "completion", "must be a string"},
      {chat, R"({"foo": 1})", "chat", "missing field 'messages'"},
      {chat, R"({"messages": []})", "", "empty conversation"},
      {chat, R"({"messages": [{"role":"robot","content":"x"}]})", "", "unknown role 'robot'"},
      {chat, R"({"messages": [{"role":"user"}]})", "", "missing field 'messages[0].content'"},
      {share, R"({"conversations": [{"from":"alien","value":"x"}]})", "", "unknown role 'alien'"},
      {text, "{\"text\": \"bad \xff byte\"}", "", "invalid UTF-8"},
      {pre, R"({"input_ids": [1, "x"]})", "", "must be an integer"},
      {pre, R"({"input_ids": [1, 2], "labels": [1]})", "", "labels has 1 entries"},
      {alp, R"({"instruction": "x"})", "alpaca", "missing field 'output'"},
  };
  for (const auto& c : cases) {
    const auto path = write("bad.jsonl", c.good + "\n" + c.content + "\n");
    try {
      dataset_read(path, c.type, false);
      ADD_FAILURE() << "no error for " << c.content;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":2: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
    const auto skipped = dataset_read(path, c.type, true);
    EXPECT_EQ(skipped.skipped_rows, 1) << c.content;
    EXPECT_EQ(skipped.total_rows, 2) << c.content;
    EXPECT_EQ(skipped.rows.size(), 1u) << c.content;
  }
  // Through the pipeline: error by default, counted with skip_bad_rows.
  const auto path = write("mixed.jsonl", "{\"text\":\"a\"}\n{oops\n{\"text\":\"b\"}\n");
  EXPECT_THROW(data_prepare(config({{path, "", ""}})), Error);
  auto cfg = config({{path, "", ""}});
  cfg.skip_bad_rows = true;
  const auto data = data_prepare(cfg);
  EXPECT_EQ(data.train.size(), 2u);
  EXPECT_EQ(data.train_stats.skipped_bad_rows, 1);
  EXPECT_EQ(data.datasets[0].skipped_rows, 1);
}

// Fuzz findings: a dataset that gives no examples names its file and why (an empty file or JSON array, a
// file of only bad rows with skip_bad_rows, a directory); empty input_ids is a bad row with its line; a
// null required string field says so.
TEST_F(DataPipeline, DatasetsWithNoExamplesNameTheFile) {
  auto expect_error = [&](const RunConfig& cfg, const std::vector<std::string>& needles) {
    try {
      data_prepare(cfg);
      ADD_FAILURE() << "no error for " << cfg.datasets[0].path;
    } catch (const Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  const std::string good = R"({"text":"fine"})";
  const auto ok = write("ok.jsonl", good + "\n");
  for (const char* content : {"", "\n \r\n\n", "[]", " [ ]\n", "\xEF\xBB\xBF"}) {
    const auto empty = write("empty.jsonl", content);
    expect_error(config({{empty, "", ""}}), {empty + ": no rows"});
    expect_error(config({{ok, "", ""}, {empty, "completion", ""}}), {empty + ": no rows"});
  }
  auto cache_files = [&] {
    return std::distance(fs::directory_iterator(dir / "cache"), fs::directory_iterator{});
  };
  EXPECT_EQ(cache_files(), 1) << "only ok.jsonl's tokens are cached, no file of a failed dataset";
  auto skip = config({{write("bad.jsonl", "{oops\n{\"messages\":[]}\n"), "", ""}});
  skip.skip_bad_rows = true;
  expect_error(skip, {"bad.jsonl: every row is bad (2 skipped with skip_bad_rows)", "bad.jsonl:1: malformed JSON"});
  // Rows that fail only when tokenized (an id outside the vocabulary) count the same way.
  skip.datasets = {{write("ids.jsonl", "{\"input_ids\":[999999]}\n"), "", ""}};
  expect_error(skip, {"ids.jsonl: every row is bad (1 skipped", "ids.jsonl:1: input_ids[0] = 999999"});
  EXPECT_EQ(cache_files(), 1);
  fs::create_directories(dir / "folder.jsonl");
  expect_error(config({{(dir / "folder.jsonl").string(), "", ""}}), {"folder.jsonl: is a directory"});
  expect_error(config({{(dir / "missing.jsonl").string(), "", ""}}), {"missing.jsonl: dataset file not found"});

  const auto empty_ids = write("e.jsonl", R"({"input_ids":[1]})" "\n" R"({"input_ids":[]})" "\n");
  expect_error(config({{empty_ids, "", ""}}), {empty_ids + ":2: field 'input_ids' is empty"});
  const auto null_out = write("n.jsonl", R"({"instruction":"i","output":null})" "\n");
  expect_error(config({{null_out, "alpaca", ""}}), {null_out + ":1: field 'output' must be a string, got null"});

  // Every example dropped for length: the message says so.
  auto drop = config({{write("long.jsonl", R"({"input_ids":[1,2,3,4,5]})" "\n"), "", ""}});
  drop.sequence_len = 4;
  drop.truncation = "drop";
  expect_error(drop, {"no training examples left in", "long.jsonl: 1 dropped as longer than sequence_len 4"});
}

// Fuzz finding: a run whose examples have no trained token (no assistant turn, labels all -100) trained
// silently at loss 0. It still prepares, with a warning that names the cause.
TEST_F(DataPipeline, ExamplesWithoutTrainedTokensAreWarned) {
  const auto chat = write("c.jsonl",
                          R"({"messages":[{"role":"user","content":"only a question"}]})"
                          "\n"
                          R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]})"
                          "\n");
  auto some = data_prepare(config({{chat, "", ""}}));
  ASSERT_EQ(some.warnings.size(), 1u);
  EXPECT_NE(some.warnings[0].find("1 of 2 training examples have no trained token"), std::string::npos)
      << some.warnings[0];
  const auto masked = write("m.jsonl", R"({"input_ids":[1,2],"labels":[-100,-100]})"
                                       "\n");
  auto none = data_prepare(config({{masked, "", ""}}));
  ASSERT_EQ(none.warnings.size(), 1u);
  EXPECT_NE(none.warnings[0].find("no training example has a trained token"), std::string::npos)
      << none.warnings[0];
  EXPECT_EQ(none.train_stats.trained_tokens, 0);
  auto cfg = config({{chat, "", ""}});
  cfg.train_on_inputs = true;
  EXPECT_TRUE(data_prepare(cfg).warnings.empty());
}

TEST_F(DataPipeline, ValidationSplitIsDeterministic) {
  std::string lines;
  for (int i = 0; i < 50; ++i) lines += "{\"text\":\"row " + std::to_string(i) + "\"}\n";
  const auto path = write("rows.jsonl", lines);
  auto cfg = config({{path, "", ""}});
  cfg.val_set_size = 0.1;
  const auto a = data_prepare(cfg), b = data_prepare(cfg);
  EXPECT_EQ(a.eval.size(), 5u);
  EXPECT_EQ(a.train.size(), 45u);
  EXPECT_EQ(a.eval_sources, b.eval_sources);
  cfg.seed = 7;
  const auto c = data_prepare(cfg);
  EXPECT_NE(a.eval_sources, c.eval_sources);
  // A test_datasets file replaces the fraction.
  cfg.test_datasets = {{write("eval.jsonl", "{\"text\":\"e\"}\n"), "", ""}};
  const auto d = data_prepare(cfg);
  EXPECT_EQ(d.eval.size(), 1u);
  EXPECT_EQ(d.train.size(), 50u);
}

TEST_F(DataPipeline, TruncateOrDropLongExamples) {
  std::string long_text(400, 'x');
  for (size_t i = 0; i < long_text.size(); i += 2) long_text[i] = ' ';
  const auto path = write("long.jsonl", "{\"text\":\"" + long_text + "\"}\n{\"text\":\"short\"}\n");
  auto cfg = config({{path, "", ""}});
  cfg.sequence_len = 32;
  const auto t = data_prepare(cfg);
  EXPECT_EQ(t.train.size(), 2u);
  EXPECT_EQ(t.train_stats.truncated, 1);
  EXPECT_EQ(t.train[0].input_ids.size(), 32u);
  cfg.truncation = "drop";
  const auto d = data_prepare(cfg);
  EXPECT_EQ(d.train.size(), 1u);
  EXPECT_EQ(d.train_stats.dropped, 1);
}

TEST_F(DataPipeline, TokenCacheIsReusedAndRebuiltWhenCorrupt) {
  const auto path = write("c.jsonl", "{\"text\":\"cache me\"}\n{\"text\":\"and me\"}\n");
  auto cfg = config({{path, "", ""}});
  std::vector<std::string> logs;
  auto log = [&](const std::string& s) { logs.push_back(s); };
  const auto first = data_prepare(cfg, log);
  ASSERT_FALSE(logs.empty());
  EXPECT_EQ(logs[0].find("token cache"), std::string::npos);
  logs.clear();
  const auto second = data_prepare(cfg, log);
  ASSERT_FALSE(logs.empty());
  EXPECT_NE(logs[0].find("from the token cache"), std::string::npos) << logs[0];
  EXPECT_EQ(first.train[0].input_ids, second.train[0].input_ids);
  EXPECT_EQ(first.train_sources, second.train_sources);
  // Corrupt every cache file: ignored and rebuilt.
  for (const auto& e : fs::directory_iterator(cfg.dataset_prepared_path)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.write("garbage!", 8);
  }
  logs.clear();
  const auto third = data_prepare(cfg, log);
  EXPECT_EQ(logs[0].find("token cache"), std::string::npos) << logs[0];
  EXPECT_EQ(first.train[1].input_ids, third.train[1].input_ids);
  // A changed setting (train_on_inputs) or file content is a different key.
  write("c.jsonl", "{\"text\":\"changed\"}\n");
  logs.clear();
  const auto fourth = data_prepare(cfg, log);
  EXPECT_EQ(fourth.train.size(), 1u);
  EXPECT_EQ(logs[0].find("token cache"), std::string::npos);
}

// enable_thinking reaches the template as HF's kwarg (only when set; a Python bool, printed True/False as
// jinja2 does) and is part of the token cache key.
TEST_F(DataPipeline, EnableThinkingReachesTheTemplate) {
  write_template("{% if enable_thinking is defined %}{{ 'think=' ~ enable_thinking }}{% endif %}");
  const auto chat = write("chat.jsonl",
                          R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]})"
                          "\n");
  Tokenizer tok = Tokenizer::from_file((dir / "model/tokenizer.json").string());
  std::vector<std::string> texts;
  for (const char* mode : {"auto", "false", "true"}) {
    RunConfig cfg = config({{chat, "", ""}});
    cfg.enable_thinking = mode;
    std::vector<std::string> logs;
    const auto prepared = data_prepare(cfg, [&](const std::string& m) { logs.push_back(m); });
    ASSERT_EQ(prepared.train.size(), 1u);
    EXPECT_EQ(logs[0].find("token cache"), std::string::npos) << mode << ": a cached encoding of another mode";
    texts.push_back(tok.decode(prepared.train[0].input_ids));
  }
  EXPECT_EQ(texts[0].find("think="), std::string::npos) << texts[0];
  EXPECT_NE(texts[1].find("think=False"), std::string::npos) << texts[1];
  EXPECT_NE(texts[2].find("think=True"), std::string::npos) << texts[2];
}

TEST(DataPacking, ShuffleIsAPinnedPermutation) {
  const auto a = shuffled_indices(10, 42, 1);
  EXPECT_EQ(a, shuffled_indices(10, 42, 1));
  EXPECT_NE(a, shuffled_indices(10, 42, 2));
  std::set<size_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 10u);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(uniform_below(rng, 7), 7u);
}

TEST(DataPacking, FirstFitDecreasing) {
  const std::vector<int64_t> lengths = {5, 9, 2, 7, 3, 1, 8, 4};
  const auto rows = pack_first_fit_decreasing(lengths, 10);
  // FFD: 9+1, 8+2, 7+3, 5+4 -> 4 rows (the optimum here).
  ASSERT_EQ(rows.size(), 4u);
  std::multiset<size_t> seen;
  for (const auto& r : rows) {
    int64_t total = 0;
    for (size_t i : r) total += lengths[i], seen.insert(i);
    EXPECT_LE(total, 10);
  }
  EXPECT_EQ(seen.size(), lengths.size());
  EXPECT_EQ(rows[0], (std::vector<size_t>{1, 5}));
  EXPECT_EQ(rows[1], (std::vector<size_t>{6, 2}));
}

TEST(DataPacking, EpochBatches) {
  std::vector<Example> exs;
  for (int i = 1; i <= 20; ++i) {
    Example e;
    for (int t = 0; t < i; ++t)
      e.input_ids.push_back(100 * i + t), e.labels.push_back(t == 0 ? -100 : 100 * i + t);
    exs.push_back(e);
  }
  RunConfig cfg;
  cfg.sequence_len = 32;
  cfg.micro_batch_size = 2;
  cfg.sample_packing = true;
  const auto b0 = data_epoch_batches(exs, cfg, 0), b0again = data_epoch_batches(exs, cfg, 0),
             b1 = data_epoch_batches(exs, cfg, 1);
  int64_t tokens = 0, rows = 0;
  for (const auto& b : b0) {
    tokens += static_cast<int64_t>(b.input_ids.size());
    rows += b.rows;
    EXPECT_LE(b.rows, 2);
    EXPECT_LE(static_cast<int64_t>(b.input_ids.size()), 2 * cfg.sequence_len);
    ASSERT_EQ(b.cu_seqlens.back(), static_cast<int32_t>(b.input_ids.size()));
    for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
      EXPECT_EQ(b.positions[static_cast<size_t>(b.cu_seqlens[s])], 0);
      EXPECT_EQ(b.targets[static_cast<size_t>(b.cu_seqlens[s + 1] - 1)], -100);  // no cross-sequence target
    }
  }
  EXPECT_EQ(tokens, 210);  // every example exactly once
  EXPECT_EQ(rows, 7);      // 210 tokens / 32 -> at least 7 rows; FFD reaches it
  ASSERT_EQ(b0.size(), b0again.size());
  for (size_t i = 0; i < b0.size(); ++i) EXPECT_EQ(b0[i].input_ids, b0again[i].input_ids);
  bool differs = b0.size() != b1.size();
  for (size_t i = 0; !differs && i < b0.size(); ++i) differs = b0[i].input_ids != b1[i].input_ids;
  EXPECT_TRUE(differs) << "epochs should be shuffled differently";
  cfg.sample_packing = false;
  const auto unpacked = data_epoch_batches(exs, cfg, 0);
  EXPECT_EQ(unpacked.size(), 10u);
  for (const auto& b : unpacked) EXPECT_EQ(b.cu_seqlens.size(), 3u);
  const auto stats = data_stats(exs, [&] {
    auto c = cfg;
    c.sample_packing = true;
    return c;
  }());
  EXPECT_EQ(stats.rows, 7);
  EXPECT_NEAR(stats.packing_efficiency, 210.0 / (7 * 32), 1e-12);
}

}  // namespace
}  // namespace deltatune
