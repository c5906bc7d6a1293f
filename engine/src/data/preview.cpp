// The studio's Data page: statistics of the whole run's data plus the first examples token by token.
#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/pipeline.h"
#include "data/tokenizer.h"
#include "deltatune/data_preview.h"

namespace fs = std::filesystem;

namespace deltatune {

DataPreview preview_data(const RunConfig& cfg, int max_examples) {
  DataPreview p;
  PreparedData d = data_prepare(cfg);
  p.datasets = d.datasets;
  p.stats = d.train_stats;
  p.stats.eval_examples = static_cast<int64_t>(d.eval.size());
  p.warnings = d.warnings;
  if (max_examples <= 0) return p;

  std::optional<Tokenizer> tok;
  if (fs::is_regular_file(cfg.base_model) || fs::exists(fs::path(cfg.base_model) / "tokenizer.json"))
    tok.emplace(Tokenizer::from_file(cfg.base_model));
  std::unique_ptr<ChatTemplate> tpl;
  try {
    tpl = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(cfg.base_model));
  } catch (const Error&) {
    // data_prepare already failed if a chat dataset needed it
  }
  for (const DatasetSpec& spec : cfg.datasets) {
    if (static_cast<int>(p.examples.size()) >= max_examples) break;
    if (spec.split == "validation") continue;
    const DatasetFile file = dataset_read(spec.path, spec.type, true);
    for (const DatasetRow& row : file.rows) {
      if (static_cast<int>(p.examples.size()) >= max_examples) break;
      PreviewExample ex;
      if (!tok) {  // pre-tokenized data of a checkpoint without tokenizer: ids only
        ex.source = row.source;
        for (size_t i = 0; i < row.input_ids.size(); ++i) {
          const int32_t label = row.labels.empty() ? row.input_ids[i] : row.labels[i];
          ex.tokens.push_back({row.input_ids[i], "#" + std::to_string(row.input_ids[i]), label != -100});
        }
        p.examples.push_back(std::move(ex));
        continue;
      }
      const RenderedExample r = render_preview(*tok, tpl.get(), row, cfg.train_on_inputs, cfg.sequence_len, d.eos_id,
                                                   chat_options(cfg));
      ex.source = r.source;
      ex.truncated = r.truncated;
      for (size_t i = 0; i < r.ids.size(); ++i)
        ex.tokens.push_back({r.ids[i], i < r.pieces.size() ? r.pieces[i] : std::string(), r.labels[i] != -100});
      p.examples.push_back(std::move(ex));
    }
  }
  return p;
}

}  // namespace deltatune
