// deltatune prepare RUN.yaml [--out tokens.jsonl]
// Reads, renders, tokenizes (or loads from the token cache) and packs a run's datasets; prints the
// statistics. --out writes one {"input_ids", "labels"} line per example (train, then validation
// examples with "split": "validation").
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "data/pipeline.h"
#include "deltatune/run_config.h"
#include "io/files.h"

namespace deltatune::cli {

namespace {

void print_stats(const char* name, const DataStats& s, bool packing) {
  std::printf("%s: examples %lld, tokens %lld, trained tokens %lld, truncated %lld, dropped %lld", name,
              static_cast<long long>(s.examples), static_cast<long long>(s.tokens),
              static_cast<long long>(s.trained_tokens), static_cast<long long>(s.truncated),
              static_cast<long long>(s.dropped));
  if (s.skipped_bad_rows) std::printf(" (%lld bad rows skipped)", static_cast<long long>(s.skipped_bad_rows));
  std::printf(", %s %lld, packing efficiency %.1f%%\n", packing ? "packed rows" : "rows",
              static_cast<long long>(s.rows), 100.0 * s.packing_efficiency);
}

}  // namespace

int cmd_prepare(const Args& raw) {
  const auto args = parse_args(raw, {"--out"}, {});
  check(args.positionals.size() == 1, "usage: deltatune prepare RUN.yaml [--out tokens.jsonl]");
  const RunConfig cfg = run_config_from_yaml_file(args.positionals[0]);
  const PreparedData data = data_prepare(cfg, [](const std::string& line) { std::cerr << line << "\n"; });
  for (const auto& d : data.datasets)
    std::printf("dataset %s: %s, %lld rows%s%s\n", d.path.c_str(), d.format.c_str(),
                static_cast<long long>(d.rows), d.split.empty() ? "" : " (validation)",
                d.skipped_rows ? (", " + std::to_string(d.skipped_rows) + " skipped").c_str() : "");
  print_stats("train", data.train_stats, cfg.sample_packing);
  if (!data.eval.empty()) print_stats("eval", data.eval_stats, cfg.sample_packing);
  if (args.has("--out")) {
    std::string out;
    auto emit = [&](const Example& e, bool eval) {
      nlohmann::ordered_json j;
      j["input_ids"] = e.input_ids;
      j["labels"] = e.labels;
      if (eval) j["split"] = "validation";
      out += j.dump();
      out += '\n';
    };
    for (const auto& e : data.train) emit(e, false);
    for (const auto& e : data.eval) emit(e, true);
    write_text_file_atomic(args.get("--out"), out);
    std::printf("wrote %zu examples to %s\n", data.train.size() + data.eval.size(),
                args.get("--out").c_str());
  }
  return 0;
}

}  // namespace deltatune::cli
