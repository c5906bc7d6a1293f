// The studio's Data page: statistics of the whole run's data plus the first examples token by token.
#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/image_rows.h"
#include "data/pipeline.h"
#include "data/preview_images.h"
#include "data/tokenizer.h"
#include "vision/chat_images.h"
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
  const std::optional<VisionDataConfig> vision = vision_data_config_read(cfg.base_model);
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
      std::vector<std::string> image_paths;
      try {
        if (row.kind == RowKind::kChat) image_paths = chat_image_paths(row.messages, spec.path, row.source);
      } catch (const Error& e) {
        ex.error = e.what();
      }
      for (const std::string& path : image_paths) {
        ex.images.push_back(preview_image(path, vision ? &*vision : nullptr, row.source));
        if (ex.error.empty()) ex.error = ex.images.back().error;
      }
      // A row with a bad image is still shown, rendered with the template's one placeholder per image.
      const bool expand = !image_paths.empty() && ex.error.empty();
      const RenderedExample r = render_preview(*tok, tpl.get(), row, cfg.train_on_inputs, cfg.sequence_len, d.eos_id,
                                               chat_options(cfg), expand ? &*vision : nullptr, spec.path);
      ex.source = r.source;
      ex.truncated = r.truncated;
      ex.images.resize(std::min(ex.images.size(), expand ? r.images.size() : ex.images.size()));
      const int32_t image_token = vision ? static_cast<int32_t>(vision->vision.image_token_id) : -1;
      for (size_t i = 0; i < r.ids.size(); ++i)
        ex.tokens.push_back({r.ids[i], i < r.pieces.size() ? r.pieces[i] : std::string(), r.labels[i] != -100,
                             r.ids[i] == image_token});
      p.examples.push_back(std::move(ex));
    }
  }
  return p;
}


std::vector<PreviewTokenRun> preview_token_runs(const PreviewExample& ex) {
  std::vector<PreviewTokenRun> runs;
  for (size_t i = 0; i < ex.tokens.size(); ++i) {
    const PreviewToken& t = ex.tokens[i];
    if (t.image && !runs.empty()) {
      const PreviewToken& prev = ex.tokens[runs.back().first];
      if (prev.image && prev.id == t.id && runs.back().first + size_t(runs.back().count) == i) {
        ++runs.back().count;
        continue;
      }
    }
    runs.push_back({i, 1});
  }
  return runs;
}

std::string preview_example_text(const PreviewExample& ex, bool mark_untrained) {
  std::string out;
  for (const PreviewTokenRun& run : preview_token_runs(ex)) {
    const PreviewToken& t = ex.tokens[run.first];
    std::string piece = t.text;
    for (size_t k = 0; (k = piece.find('\n', k)) != std::string::npos;) piece.replace(k, 1, "\\n");
    if (t.image) piece += " x " + std::to_string(run.count);
    if (mark_untrained && !t.trained) piece = "[" + piece + "]";
    if (!out.empty()) out += '|';
    out += piece;
  }
  if (ex.truncated) out += " [truncated]";
  return out;
}

}  // namespace deltatune
