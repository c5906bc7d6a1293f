// deltatune prepare RUN.yaml [--out tokens.jsonl] [--preview N]
// Reads, renders, tokenizes (or loads from the token cache) and packs a run's datasets; prints the
// statistics. --out writes one {"input_ids", "labels"} line per example (train, then validation
// examples with "split": "validation"). --preview N prints the first N train examples token by token, as the
// studio's Data page shows them (a run of image tokens as "<|image_pad|> x 256", [untrained] tokens, each image's
// size and tokens, or why it cannot be used).
#include <cstdio>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "deltatune/data_preview.h"
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
  if (s.images > 0)
    std::printf("%s images: %lld, image tokens %lld, at most %lld in one micro-batch (deltatune info --image-tokens)\n",
                name, static_cast<long long>(s.images), static_cast<long long>(s.image_tokens),
                static_cast<long long>(s.max_image_tokens_per_step));
}

}  // namespace

int cmd_prepare(const Args& raw) {
  const auto args = parse_args(raw, {"--out", "--preview"}, {});
  check(args.positionals.size() == 1, "usage: deltatune prepare RUN.yaml [--out tokens.jsonl] [--preview N]");
  int preview = 0;
  if (args.has("--preview")) {
    const std::string v = args.get("--preview");
    check(!v.empty() && v.size() < 6 && v.find_first_not_of("0123456789") == std::string::npos,
          "option --preview expects a number of examples, got '" + v + "'");
    preview = std::stoi(v);
  }
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
  if (preview > 0) {
    const DataPreview p = preview_data(cfg, preview);
    for (const PreviewExample& ex : p.examples) {
      std::printf("\n%s: %zu tokens%s\n", ex.source.c_str(), ex.tokens.size(), ex.truncated ? " (truncated)" : "");
      for (const PreviewImage& im : ex.images) {
        if (!im.error.empty())
          std::printf("  image %s: %s\n", im.path.c_str(), im.error.c_str());
        else
          std::printf("  image %s: %lldx%lld -> %lldx%lld, %lld patches, %lld tokens\n", im.path.c_str(),
                      static_cast<long long>(im.width), static_cast<long long>(im.height),
                      static_cast<long long>(im.resized_width), static_cast<long long>(im.resized_height),
                      static_cast<long long>(im.patches), static_cast<long long>(im.tokens));
      }
      if (!ex.error.empty() && (ex.images.empty() || ex.images.back().error != ex.error))
        std::printf("  not trainable: %s\n", ex.error.c_str());
      std::printf("  %s\n", preview_example_text(ex).c_str());
    }
  }
  return 0;
}

}  // namespace deltatune::cli
