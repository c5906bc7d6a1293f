// What the studio's Data page shows about a run's datasets: detected formats, a few rendered examples
// token by token, and whole-dataset statistics. Implemented over the data pipeline (engine/src/data).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deltatune/run_config.h"

namespace deltatune {

struct PreviewToken {
  int32_t id = 0;
  std::string text;      // decoded piece (UTF-8; may be a partial character shown as U+FFFD)
  bool trained = false;  // label != -100
};

struct PreviewExample {
  std::string source;    // "<file>:<line>"
  std::vector<PreviewToken> tokens;
  bool truncated = false;
};

struct DatasetSummary {
  std::string path;
  std::string format;    // detected (or configured) type: chat | sharegpt | alpaca | completion | pretokenized
  std::string split;     // "" train, "validation"
  int64_t rows = 0;
  int64_t skipped_rows = 0;
};

struct DataStats {
  int64_t examples = 0;          // after dropping/skipping
  int64_t tokens = 0;            // input tokens over all examples
  int64_t trained_tokens = 0;    // labels != -100
  int64_t truncated = 0;         // examples cut to sequence_len
  int64_t dropped = 0;           // examples dropped (truncation: drop) or skipped as bad rows
  int64_t packed_rows = 0;       // rows of sequence_len when sample_packing, else = examples
  double packing_efficiency = 0; // tokens / (packed_rows * sequence_len), 0..1
  int64_t eval_examples = 0;     // held out by val_set_size or from test_datasets
  // Added by the data pipeline (engine/src/data/pipeline.h uses this struct for its statistics):
  int64_t skipped_bad_rows = 0;  // bad rows skipped with skip_bad_rows (also counted in dropped)
  int64_t rows = 0;              // same as packed_rows (the name the trainer uses)
};

struct DataPreview {
  std::vector<DatasetSummary> datasets;
  std::vector<PreviewExample> examples;  // the first max_examples train examples, in file order
  DataStats stats;
  std::vector<std::string> warnings;
};

// Reads, renders and tokenizes the datasets of `cfg` with the tokenizer of cfg.base_model (using the
// token cache when present). Throws deltatune::Error naming the file/row on bad input.
DataPreview preview_data(const RunConfig& cfg, int max_examples);

}  // namespace deltatune
