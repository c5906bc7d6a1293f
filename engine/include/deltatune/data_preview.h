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
  bool image = false;    // one of an image's placeholder tokens (<|image_pad|>), one per merged patch
};

// One image of a chat row as the model sees it: decoded (alpha onto white, as training does), resized to
// its patch grid, and expanded to `tokens` placeholder tokens.
struct PreviewImage {
  std::string path;
  int64_t width = 0, height = 0;                  // decoded
  int64_t resized_width = 0, resized_height = 0;  // smart_resize's patch-grid size
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;     // patches (temporal, height, width)
  int64_t patches = 0;                            // grid_t·grid_h·grid_w rows into the vision tower
  int64_t tokens = 0;                             // merged patches = <|image_pad|> tokens in the text
  // The decoded image scaled down to fit kPreviewThumbnailSide (never up), 8-bit RGB row-major.
  int64_t thumbnail_width = 0, thumbnail_height = 0;
  std::vector<uint8_t> thumbnail_rgb;
  std::string error;  // why it cannot be used ("<file>:<line>: image <path>: ..."); the other fields are then 0
};
inline constexpr int64_t kPreviewThumbnailSide = 160;

struct PreviewExample {
  std::string source;    // "<file>:<line>"
  std::vector<PreviewToken> tokens;
  bool truncated = false;
  std::vector<PreviewImage> images;  // in the order of their token runs
  std::string error;                 // the row cannot be trained on (e.g. a bad image); tokens may be empty
};

// Consecutive tokens shown as one: a run of an image's placeholder tokens becomes one entry with `count`
// (the preview's "<|image_pad|> x 256"); every other token is its own entry with count 1.
struct PreviewTokenRun {
  size_t first = 0;  // index into PreviewExample::tokens
  int64_t count = 1;
};
std::vector<PreviewTokenRun> preview_token_runs(const PreviewExample& ex);

// The example as one line of text for a terminal: tokens separated by '|', a run of image tokens written
// "<|image_pad|> x N", untrained tokens in [brackets] when mark_untrained.
std::string preview_example_text(const PreviewExample& ex, bool mark_untrained = true);

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
  // Chat rows with images (0 for text-only data):
  int64_t images = 0;
  int64_t image_tokens = 0;                // <|image_pad|> tokens over all examples (merged patches)
  int64_t max_image_tokens_per_step = 0;   // the most image tokens in one micro-batch of the first epoch
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
