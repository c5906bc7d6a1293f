// The data pipeline as the trainer, the CLI (`deltatune prepare`/`tokenize`) and the studio use it:
// datasets -> rendered + tokenized examples (cached on disk) -> validation split -> truncation ->
// per-epoch shuffled, packed micro-batches.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/chat_template.h"  // ChatOptions
#include "deltatune/data_preview.h"  // DataStats, DatasetSummary
#include "deltatune/run_config.h"

namespace deltatune {

class Tokenizer;
class ChatTemplate;
struct DatasetRow;
struct VisionDataConfig;

struct PreparedData {
  std::vector<Example> train, eval;
  std::vector<std::string> train_sources, eval_sources;  // "file:line" per example
  DataStats train_stats, eval_stats;
  std::vector<DatasetSummary> datasets;  // one per dataset file, in config order
  int32_t eos_id = -1, pad_id = -1;
  std::vector<std::string> warnings;  // e.g. skipped rows (first few reasons), cache write failures
};

// Reads every dataset of cfg (datasets and test_datasets), tokenizes with the tokenizer and chat template
// of cfg.base_model (or loads the token cache), splits off the validation set (split: validation files,
// test_datasets, else val_set_size of the train examples, chosen by cfg.seed), and truncates or drops
// examples longer than sequence_len. `log` gets progress lines. Throws Error ("file:line: reason").
PreparedData data_prepare(const RunConfig& cfg, const std::function<void(const std::string&)>& log = {});

// Micro-batches of one epoch: shuffled with (cfg.seed, epoch), packed (first-fit-decreasing into rows of
// sequence_len) when cfg.sample_packing, micro_batch_size rows (or examples) per batch.
std::vector<Batch> data_epoch_batches(const std::vector<Example>& examples, const RunConfig& cfg,
                                      int64_t epoch);

// Content hash (hex) of examples' ids and labels, in order: a resumed run checks it against the one in its
// checkpoint, so a dataset edited, replaced or truncated since the run started is not trained on as if
// the checkpoint's data position still meant the same thing.
std::string data_fingerprint(const std::vector<Example>& examples);

// Statistics of a set of (already truncated) examples under cfg's packing settings.
DataStats data_stats(const std::vector<Example>& examples, const RunConfig& cfg);

// Tokenizes one dataset row exactly as data_prepare does (chat rows need `tpl`); throws Error with the
// row's source on a bad row.
// Chat rows with image parts need `vision` (the checkpoint's vision settings); their relative image paths are
// relative to the folder of `dataset_path`.
Example data_encode_row(const Tokenizer& tok, const ChatTemplate* tpl, const DatasetRow& row,
                        bool train_on_inputs, int32_t eos_id, const ChatOptions& chat = {},
                        const VisionDataConfig* vision = nullptr, const std::string& dataset_path = {});
// The template options a run config asks for (enable_thinking).
ChatOptions chat_options(const RunConfig& cfg);

// One example as the studio's Data page shows it.
struct RenderedExample {
  std::string source;
  std::string text;                  // rendered conversation / completion text ("" for pre-tokenized rows)
  std::vector<int32_t> ids, labels;  // after truncation to sequence_len
  std::vector<std::string> pieces;   // decoded text of each token
  std::vector<int64_t> token_starts, token_ends;  // byte ranges of each token in `text` (empty if no text)
  bool truncated = false;
  std::vector<Example::Image> images;  // chat rows with image parts, when `vision` was given
};
// Chat rows with image parts: with `vision`, each image's placeholder is expanded to its merged patches as
// data_encode_row does it (a bad image throws naming the file and row; an image cut by sequence_len is dropped
// whole, as data_prepare does); without it, the template's one placeholder per image is kept. Relative image
// paths are relative to the folder of `dataset_path`.
RenderedExample render_preview(const Tokenizer& tok, const ChatTemplate* tpl, const DatasetRow& row,
                               bool train_on_inputs, int64_t sequence_len, int32_t eos_id,
                               const ChatOptions& chat = {}, const VisionDataConfig* vision = nullptr,
                               const std::string& dataset_path = {});

// The eos / pad ids of a checkpoint folder's tokenizer_config.json (eos_token, pad_token), falling back
// to <|im_end|> / <|endoftext|> when not set.
int32_t tokenizer_eos_id(const Tokenizer& tok, const std::string& model_dir);
int32_t tokenizer_pad_id(const Tokenizer& tok, const std::string& model_dir);

}  // namespace deltatune
