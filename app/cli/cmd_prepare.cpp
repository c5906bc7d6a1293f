// deltatune prepare RUN.yaml [--out tokens.jsonl]
// Reads, renders, tokenizes (or loads from the token cache) and packs a run's datasets; prints the
// statistics. --out writes one {"input_ids", "labels"} line per example (train, then validation
// examples with "split": "validation").
#include <cstdio>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/prepare.h"
#include "deltatune/run_config.h"

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
  const std::string tokens_out = args.has("--out") ? args.get("--out") : "";
  const PrepareResult data =
      prepare_data(cfg, [](const std::string& line) { std::cerr << line << "\n"; }, tokens_out);
  for (const auto& d : data.datasets)
    std::printf("dataset %s: %s, %lld rows%s%s\n", d.path.c_str(), d.format.c_str(),
                static_cast<long long>(d.rows), d.split.empty() ? "" : " (validation)",
                d.skipped_rows ? (", " + std::to_string(d.skipped_rows) + " skipped").c_str() : "");
  print_stats("train", data.train_stats, cfg.sample_packing);
  if (data.eval_examples > 0) print_stats("eval", data.eval_stats, cfg.sample_packing);
  if (!tokens_out.empty())
    std::printf("wrote %lld examples to %s\n", static_cast<long long>(data.train_examples + data.eval_examples),
                tokens_out.c_str());
  return 0;
}

}  // namespace deltatune::cli
