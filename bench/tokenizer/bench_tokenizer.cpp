// Tokenizer throughput: tokens/s on one thread and on all cores, compared with HF `tokenizers` on the
// same documents (when --python is given). The documents are the parity corpus of
// tests/goldens/tokenizer (many scripts, code, whitespace, emoji, long inputs), each copy numbered so
// documents differ, repeated to about --mb megabytes. Ids are checked against HF's before timing.
//
//   bench_tokenizer --tokenizer path/to/tokenizer.json [--mb 8] [--python PYTHON] [--source
//   REPO]
// --tokenizer defaults to $DT_QWEN3_TOKENIZER (Qwen3's tokenizer.json, whose goldens the corpus carries).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer.h"

using deltatune::Tokenizer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_tok = std::getenv("DT_QWEN3_TOKENIZER");
  std::string tok_path = env_tok ? env_tok : "", python, source = DT_SOURCE_DIR;
  double mb = 8;
  bool no_long = false;  // --no-long 1: leave out the corpus' degenerate long inputs (5000 x "a", ...)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer"))
      tok_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--mb"))
      mb = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--python"))
      python = argv[i + 1];
    else if (!std::strcmp(argv[i], "--source"))
      source = argv[i + 1];
    else if (!std::strcmp(argv[i], "--no-long"))
      no_long = std::atoi(argv[i + 1]) != 0;
  }
  if (tok_path.empty()) {
    std::fprintf(stderr, "bench_tokenizer: pass --tokenizer path/to/tokenizer.json or set DT_QWEN3_TOKENIZER\n");
    return 2;
  }
  try {
    auto t_load = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::from_file(tok_path);
    std::printf("loaded %s in %.2f s\n", tok_path.c_str(), seconds_since(t_load));

    std::vector<std::string> base;
    std::ifstream corpus(source + "/tests/goldens/tokenizer/qwen3_ids.jsonl");
    std::string line;
    while (std::getline(corpus, line)) {
      std::string t = nlohmann::json::parse(line)["text"].get<std::string>();
      if (!no_long || t.size() <= 1000) base.push_back(std::move(t));
    }
    std::vector<std::string> docs;
    size_t bytes = 0;
    for (size_t copy = 0; bytes < mb * 1e6; ++copy)
      for (const auto& t : base) {
        docs.push_back("Doc " + std::to_string(copy) + ": " + t);
        bytes += docs.back().size();
      }
    const std::string docs_path = "/tmp/dt_bench_tokenizer_docs.jsonl";
    {
      std::ofstream f(docs_path);
      for (const auto& d : docs) f << nlohmann::json{{"text", d}}.dump() << "\n";
    }
    std::printf("%zu documents, %.1f MB\n", docs.size(), bytes / 1e6);

    // Single thread (cold BPE cache for a fair first pass is not what training sees; warm it as HF's
    // own cache is warm after its warm-up).
    for (size_t i = 0; i < std::min<size_t>(docs.size(), 64); ++i) tok.encode(docs[i]);
    auto t0 = std::chrono::steady_clock::now();
    int64_t tokens = 0;
    for (const auto& d : docs) tokens += static_cast<int64_t>(tok.encode(d).size());
    const double single = seconds_since(t0);

    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::atomic<size_t> next{0};
    std::atomic<int64_t> tokens_mt{0};
    t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        int64_t local = 0;
        for (size_t i; (i = next.fetch_add(16)) < docs.size();)
          for (size_t k = i; k < std::min(docs.size(), i + 16); ++k)
            local += static_cast<int64_t>(tok.encode(docs[k]).size());
        tokens_mt += local;
      });
    for (auto& th : pool) th.join();
    const double multi = seconds_since(t0);
    std::printf("deltatune: %lld tokens; 1 thread %.2f M tok/s; %u threads %.2f M tok/s\n",
                static_cast<long long>(tokens), tokens / single / 1e6, threads, tokens_mt / multi / 1e6);

    if (!python.empty()) {
      const std::string cmd =
          python + " " + source + "/bench/tokenizer/bench_hf.py " + tok_path + " " + docs_path;
      FILE* p = popen(cmd.c_str(), "r");
      std::string out;
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      if (pclose(p) != 0 || out.empty()) {
        std::fprintf(stderr, "HF benchmark failed: %s\n", out.c_str());
        return 1;
      }
      const auto j = nlohmann::json::parse(out.substr(out.find('{')));
      const double hf_single = j["tokens"].get<double>() / j["single_s"].get<double>();
      const double hf_all = j["batch_tokens"].get<double>() / j["all_s"].get<double>();
      std::printf("HF tokenizers: %lld tokens; 1 thread %.2f M tok/s; encode_batch %.2f M tok/s\n",
                  j["tokens"].get<long long>(), hf_single / 1e6, hf_all / 1e6);
      std::printf("ratio deltatune/HF: 1 thread %.2fx, all cores %.2fx; same token count: %s\n",
                  tokens / single / hf_single, tokens_mt / multi / hf_all,
                  j["tokens"].get<int64_t>() == tokens ? "yes" : "NO");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
