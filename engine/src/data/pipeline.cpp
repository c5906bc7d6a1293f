#include "data/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset_reader.h"
#include "data/packing.h"
#include "data/token_cache.h"
#include "data/tokenizer.h"
#include "io/files.h"
#include "vision/chat_images.h"
#include "data/image_rows.h"
#include "data/image_stats.h"

namespace deltatune {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Bump when the encoding of rows changes, so old cache files are not reused (2: session 11 tokenizer and
// label-mask fixes; 3: empty files, empty input_ids and files of only bad rows are errors; 4: chat rows with
// image parts).
constexpr const char* kEncodingVersion = "dt-data-4";

std::string config_token(const std::string& model_dir, const char* key) {
  const std::string path = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (!fs::exists(path)) return "";
  try {
    const ojson cfg = ojson::parse(read_text_file(path));
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  } catch (const ojson::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  return "";
}

int32_t token_id_or(const Tokenizer& tok, const std::string& token,
                    std::initializer_list<const char*> fallbacks) {
  if (!token.empty()) {
    const int32_t id = tok.token_to_id(token);
    if (id >= 0) return id;
  }
  for (const char* f : fallbacks) {
    const int32_t id = tok.token_to_id(f);
    if (id >= 0) return id;
  }
  return -1;
}

void truncate_example(Example* ex, int64_t len) {
  ex->input_ids.resize(static_cast<size_t>(len));
  ex->labels.resize(static_cast<size_t>(len));
}

struct Encoded {
  std::vector<Example> examples;
  std::vector<std::string> sources;
  std::vector<std::string> errors;  // per row: "" ok, else the message
};

// Encodes rows on all cores; results keep row order.
// `tok` may be null for a checkpoint without tokenizer.json: then only pre-tokenized rows are possible
// (the model checks the ids against its vocabulary).
Example encode_pretokenized(const DatasetRow& row) {
  Example ex;
  ex.input_ids = row.input_ids;
  ex.labels = row.labels.empty() ? row.input_ids : row.labels;
  return ex;
}

Encoded encode_rows(const Tokenizer* tok, const ChatTemplate* tpl, const std::vector<DatasetRow>& rows,
                    bool train_on_inputs, int32_t eos_id, const ChatOptions& chat, const VisionDataConfig* vision,
                    const std::string& dataset_path) {
  Encoded out;
  out.examples.resize(rows.size());
  out.errors.resize(rows.size());
  const size_t threads =
      std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), rows.size() / 64 + 1));
  std::atomic<size_t> next{0};
  auto work = [&] {
    while (true) {
      const size_t begin = next.fetch_add(64);
      if (begin >= rows.size()) return;
      for (size_t i = begin; i < std::min(rows.size(), begin + 64); ++i) {
        try {
          out.examples[i] = tok ? data_encode_row(*tok, tpl, rows[i], train_on_inputs, eos_id, chat, vision,
                                                  dataset_path)
                                : encode_pretokenized(rows[i]);
        } catch (const Error& e) {
          const std::string msg = e.what();
          out.errors[i] = msg.rfind(rows[i].source, 0) == 0 ? msg : rows[i].source + ": " + msg;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  for (const auto& r : rows) out.sources.push_back(r.source);
  return out;
}

struct LoadedFile {
  CachedDataset data;
  bool from_cache = false;
};

LoadedFile load_dataset(const DatasetSpec& spec, const RunConfig& cfg, const Tokenizer* tok,
                        const ChatTemplate* tpl, const std::string& tpl_error, int32_t eos_id,
                        const VisionDataConfig* vision, const std::function<void(const std::string&)>& log) {
  dataset_check_file(spec.path);
  const std::string key = hash_bytes_hex(std::string(kEncodingVersion) + "|" + hash_file_hex(spec.path) +
                                         "|" + (tok ? tok->content_hash() : std::string("no-tokenizer")) + "|" + (tpl ? tpl->content_hash() : "-") +
                                         "|" + spec.type + "|" + (cfg.train_on_inputs ? "1" : "0") + "|" +
                                         (cfg.skip_bad_rows ? "1" : "0") + "|" + std::to_string(eos_id) +
                                         "|think=" + cfg.enable_thinking + "|vision=" +
                                         (vision ? vision_data_config_hash(cfg.base_model) : std::string("-")));
  const std::string cache_path = token_cache_file(token_cache_dir(cfg.dataset_prepared_path), key);
  LoadedFile out;
  if (auto cached = token_cache_load(cache_path, key)) {
    out.data = std::move(*cached);
    out.from_cache = true;
    if (log)
      log(spec.path + ": " + std::to_string(out.data.examples.size()) + " examples from the token cache");
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  DatasetFile file = dataset_read(spec.path, spec.type, cfg.skip_bad_rows);
  if (file.format == "chat" || file.format == "sharegpt" || file.format == "alpaca")
    check(tpl != nullptr, spec.path + ": " + file.format + " data needs the chat template of " +
                              cfg.base_model + ", which cannot be used: " + tpl_error);
  check(tok != nullptr || file.format == "pretokenized",
        spec.path + ": " + file.format + " data needs a tokenizer, but " + cfg.base_model +
            " has no tokenizer.json (without one only pre-tokenized rows with input_ids can be used)");
  Encoded enc = encode_rows(tok, tpl, file.rows, cfg.train_on_inputs, eos_id, chat_options(cfg), vision, spec.path);
  CachedDataset& d = out.data;
  d.format = file.format;
  d.total_rows = file.total_rows;
  d.skipped_rows = file.skipped_rows;
  d.skipped_reasons = file.skipped_reasons;
  for (size_t i = 0; i < enc.examples.size(); ++i) {
    if (!enc.errors[i].empty()) {
      if (!cfg.skip_bad_rows) throw Error(enc.errors[i]);
      ++d.skipped_rows;
      if (d.skipped_reasons.size() < 20) d.skipped_reasons.push_back(enc.errors[i]);
      continue;
    }
    d.examples.push_back(std::move(enc.examples[i]));
    d.sources.push_back(std::move(enc.sources[i]));
  }
  if (d.examples.empty()) {  // every row read was bad when tokenized (dataset_read refuses a file of no rows)
    std::string msg = spec.path + ": every row is bad (" + std::to_string(d.skipped_rows) +
                      " skipped with skip_bad_rows)";
    if (!d.skipped_reasons.empty()) msg += "; first: " + d.skipped_reasons.front();
    throw Error(msg);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (log) {
    int64_t tokens = 0;
    for (const auto& e : d.examples) tokens += static_cast<int64_t>(e.input_ids.size());
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.2f s", secs);
    log(spec.path + ": " + std::to_string(d.examples.size()) + " examples (" + d.format + "), " +
        std::to_string(tokens) + " tokens, tokenized in " + buf);
  }
  try {
    token_cache_store(cache_path, key, d);
  } catch (const std::exception& e) {
    if (log) log(std::string("warning: could not write the token cache: ") + e.what());
  }
  return out;
}

}  // namespace

int32_t tokenizer_eos_id(const Tokenizer& tok, const std::string& model_dir) {
  return token_id_or(tok, config_token(model_dir, "eos_token"), {"<|im_end|>", "<|endoftext|>", "</s>"});
}

int32_t tokenizer_pad_id(const Tokenizer& tok, const std::string& model_dir) {
  const int32_t id = token_id_or(tok, config_token(model_dir, "pad_token"), {"<|endoftext|>"});
  return id >= 0 ? id : tokenizer_eos_id(tok, model_dir);
}

ChatOptions chat_options(const RunConfig& cfg) {
  ChatOptions o;
  if (cfg.enable_thinking != "auto") o.enable_thinking = cfg.enable_thinking == "true";
  return o;
}

Example data_encode_row(const Tokenizer& tok, const ChatTemplate* tpl, const DatasetRow& row,
                        bool train_on_inputs, int32_t eos_id, const ChatOptions& chat,
                        const VisionDataConfig* vision, const std::string& dataset_path) {
  Example ex;
  switch (row.kind) {
    case RowKind::kChat: {
      check(tpl != nullptr, row.source + ": chat rows need a chat template");
      const std::vector<std::string> images = chat_image_paths(row.messages, dataset_path, row.source);
      if (!images.empty()) vision_require(vision, row.source);
      ChatEncoding enc = chat_encode(tok, *tpl, row.messages, row.tools, chat, train_on_inputs);
      ex.input_ids = std::move(enc.ids);
      ex.labels = std::move(enc.labels);
      if (!images.empty()) example_expand_images(ex, images, vision, row.source);
      break;
    }
    case RowKind::kCompletion:
      ex.input_ids = tok.encode(row.text);
      check(eos_id >= 0, row.source + ": the tokenizer has no EOS token to end a completion with");
      ex.input_ids.push_back(eos_id);
      ex.labels = ex.input_ids;
      break;
    case RowKind::kPretokenized: {
      const int64_t vocab = tok.vocab_size();
      for (size_t i = 0; i < row.input_ids.size(); ++i)
        check(row.input_ids[i] < vocab,
              row.source + ": input_ids[" + std::to_string(i) + "] = " + std::to_string(row.input_ids[i]) +
                  " is not a token id of this tokenizer (" + std::to_string(vocab) + " ids)");
      ex.input_ids = row.input_ids;
      ex.labels = row.labels.empty() ? row.input_ids : row.labels;
      break;
    }
  }
  return ex;
}

std::string data_fingerprint(const std::vector<Example>& examples) {
  // Per-example hashes, then one hash over them: memory stays small (64 bytes an example) and the
  // result does not depend on how the examples' bytes happen to be chunked.
  std::string all;
  all.reserve(examples.size() * 64);
  const auto bytes = [](const std::vector<int32_t>& v) {
    return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  };
  for (const Example& e : examples) {
    all += hash_bytes_hex(bytes(e.input_ids));
    all += hash_bytes_hex(bytes(e.labels));
  }
  return hash_bytes_hex(all);
}

DataStats data_stats(const std::vector<Example>& examples, const RunConfig& cfg) {
  DataStats s;
  s.examples = static_cast<int64_t>(examples.size());
  std::vector<int64_t> lengths;
  lengths.reserve(examples.size());
  for (const auto& e : examples) {
    s.tokens += static_cast<int64_t>(e.input_ids.size());
    for (int32_t l : e.labels) s.trained_tokens += l != -100;
    lengths.push_back(static_cast<int64_t>(e.input_ids.size()));
  }
  if (!examples.empty()) {
    const EpochPlan plan =
        plan_epoch(lengths, cfg.sequence_len, cfg.sample_packing, std::max<int64_t>(1, cfg.micro_batch_size),
                   static_cast<uint64_t>(cfg.seed), 0);
    s.rows = s.packed_rows = plan.rows;
    if (plan.rows > 0 && cfg.sequence_len > 0)
      s.packing_efficiency = static_cast<double>(s.tokens) /
                             (static_cast<double>(plan.rows) * static_cast<double>(cfg.sequence_len));
  }
  return s;
}

PreparedData data_prepare(const RunConfig& cfg, const std::function<void(const std::string&)>& log) {
  check(!cfg.datasets.empty(), "run config: datasets is empty (expected at least one {path, type})");
  check(cfg.sequence_len > 0, "run config: sequence_len must be positive");
  check(cfg.truncation == "truncate" || cfg.truncation == "drop",
        "run config: truncation must be 'truncate' or 'drop', got '" + cfg.truncation + "'");
  check(!cfg.base_model.empty(), "run config: base_model is empty (the tokenizer comes from it)");
  std::optional<Tokenizer> tok_holder;
  if (fs::is_regular_file(cfg.base_model) || fs::exists(fs::path(cfg.base_model) / "tokenizer.json"))
    tok_holder.emplace(Tokenizer::from_file(cfg.base_model));
  const Tokenizer* tok = tok_holder ? &*tok_holder : nullptr;
  std::unique_ptr<ChatTemplate> tpl;
  std::string tpl_error;
  try {
    tpl = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(cfg.base_model));
  } catch (const Error& e) {
    tpl_error = e.what();  // only chat-format datasets need one; load_dataset reports it then
  }
  PreparedData out;
  out.eos_id = tok ? tokenizer_eos_id(*tok, cfg.base_model) : -1;
  const std::optional<VisionDataConfig> vision = vision_data_config_read(cfg.base_model);
  out.pad_id = tok ? tokenizer_pad_id(*tok, cfg.base_model) : -1;

  std::vector<std::pair<const DatasetSpec*, bool>> specs;  // (spec, is_eval)
  for (const auto& d : cfg.datasets) specs.emplace_back(&d, d.split == "validation");
  for (const auto& d : cfg.test_datasets) specs.emplace_back(&d, true);
  bool have_eval_files = false;
  int64_t skipped = 0;
  for (const auto& [spec, is_eval] : specs) {
    LoadedFile f = load_dataset(*spec, cfg, tok, tpl.get(), tpl_error, out.eos_id, vision ? &*vision : nullptr, log);
    DatasetSummary summary;
    summary.path = spec->path;
    summary.format = f.data.format;
    summary.split = is_eval ? "validation" : "";
    summary.rows = f.data.total_rows;
    summary.skipped_rows = f.data.skipped_rows;
    out.datasets.push_back(summary);
    skipped += f.data.skipped_rows;
    if (f.data.skipped_rows > 0) {
      std::string w = spec->path + ": skipped " + std::to_string(f.data.skipped_rows) + " bad rows";
      if (!f.data.skipped_reasons.empty()) w += " (first: " + f.data.skipped_reasons.front() + ")";
      out.warnings.push_back(w);
      if (log) log("warning: " + w);
    }
    auto& dst = is_eval ? out.eval : out.train;
    auto& src = is_eval ? out.eval_sources : out.train_sources;
    have_eval_files = have_eval_files || is_eval;
    for (size_t i = 0; i < f.data.examples.size(); ++i) {
      dst.push_back(std::move(f.data.examples[i]));
      src.push_back(std::move(f.data.sources[i]));
    }
  }

  if (!have_eval_files && cfg.val_set_size > 0 && out.train.size() > 1) {
    const size_t n = out.train.size();
    size_t k = static_cast<size_t>(std::ceil(cfg.val_set_size * static_cast<double>(n)));
    k = std::clamp<size_t>(k, 1, n - 1);
    auto perm = shuffled_indices(n, static_cast<uint64_t>(cfg.seed), 0x7661'6c69'6400ull);  // "valid"
    std::vector<char> is_eval(n, 0);
    for (size_t i = 0; i < k; ++i) is_eval[perm[i]] = 1;
    std::vector<Example> train;
    std::vector<std::string> train_src;
    for (size_t i = 0; i < n; ++i) {
      if (is_eval[i]) {
        out.eval.push_back(std::move(out.train[i]));
        out.eval_sources.push_back(std::move(out.train_sources[i]));
      } else {
        train.push_back(std::move(out.train[i]));
        train_src.push_back(std::move(out.train_sources[i]));
      }
    }
    out.train = std::move(train);
    out.train_sources = std::move(train_src);
  }

  auto limit = [&](std::vector<Example>& exs, std::vector<std::string>& srcs, int64_t* truncated,
                   int64_t* dropped) {
    std::vector<Example> kept;
    std::vector<std::string> kept_src;
    for (size_t i = 0; i < exs.size(); ++i) {
      if (static_cast<int64_t>(exs[i].input_ids.size()) > cfg.sequence_len) {
        if (cfg.truncation == "drop") {
          ++*dropped;
          continue;
        }
        if (exs[i].images.empty()) truncate_example(&exs[i], cfg.sequence_len);
        else example_truncate(exs[i], size_t(cfg.sequence_len), int32_t(vision->vision.image_token_id),
                              int32_t(vision->vision.vision_start_token_id));
        ++*truncated;
      }
      if (exs[i].input_ids.empty()) {
        ++*dropped;
        continue;
      }
      kept.push_back(std::move(exs[i]));
      kept_src.push_back(std::move(srcs[i]));
    }
    exs = std::move(kept);
    srcs = std::move(kept_src);
  };
  int64_t tr_trunc = 0, tr_drop = 0, ev_trunc = 0, ev_drop = 0;
  limit(out.train, out.train_sources, &tr_trunc, &tr_drop);
  limit(out.eval, out.eval_sources, &ev_trunc, &ev_drop);
  if (out.train.empty()) {
    std::string files;
    for (const auto& [spec, is_eval] : specs)
      if (!is_eval) {
        if (!files.empty()) files += ", ";
        files += spec->path;
      }
    std::string msg = "no training examples left in " + (files.empty() ? std::string("the datasets") : files);
    if (tr_drop > 0)
      msg += ": " + std::to_string(tr_drop) + " dropped as longer than sequence_len " +
             std::to_string(cfg.sequence_len) + " (truncation: drop; truncation: truncate keeps them cut)";
    else if (files.empty())
      msg += ": every dataset is a validation split";
    throw Error(msg);
  }

  // Examples with every label -100 (no assistant turn, or it was truncated away; masked pre-tokenized rows) add
  // nothing to the loss: say so, and loudly when no example trains anything (the loss would stay 0).
  int64_t untrained = 0;
  for (const auto& e : out.train)
    untrained += std::none_of(e.labels.begin(), e.labels.end(), [](int32_t l) { return l != -100; });
  if (untrained > 0) {
    const std::string why =
        " (every label is -100: chat rows without an assistant turn or with it cut off at sequence_len, or "
        "pre-tokenized rows whose labels are all -100; train_on_inputs: true trains the prompts too)";
    std::string w = untrained == static_cast<int64_t>(out.train.size())
                        ? "no training example has a trained token" + why + ": the loss is 0 and nothing is learned"
                        : std::to_string(untrained) + " of " + std::to_string(out.train.size()) +
                              " training examples have no trained token" + why;
    out.warnings.push_back(w);
    if (log) log("warning: " + w);
  }

  out.train_stats = data_stats(out.train, cfg);
  out.train_stats.truncated = tr_trunc;
  out.train_stats.skipped_bad_rows = skipped;
  out.train_stats.dropped = tr_drop + skipped;
  out.train_stats.eval_examples = static_cast<int64_t>(out.eval.size());
  out.eval_stats = data_stats(out.eval, cfg);
  out.eval_stats.truncated = ev_trunc;
  out.eval_stats.dropped = ev_drop;
  out.eval_stats.eval_examples = static_cast<int64_t>(out.eval.size());
  if (vision) {
    add_image_stats(out.train_stats, out.train, cfg, vision->vision.merge_size);
    add_image_stats(out.eval_stats, out.eval, cfg, vision->vision.merge_size);
  }
  return out;
}

std::vector<Batch> data_epoch_batches(const std::vector<Example>& examples, const RunConfig& cfg,
                                      int64_t epoch) {
  std::vector<int64_t> lengths;
  lengths.reserve(examples.size());
  for (const auto& e : examples) {
    check(static_cast<int64_t>(e.input_ids.size()) <= cfg.sequence_len || !cfg.sample_packing,
          "internal: an example is longer than sequence_len (data_prepare truncates them)");
    lengths.push_back(static_cast<int64_t>(e.input_ids.size()));
  }
  const EpochPlan plan = plan_epoch(lengths, cfg.sequence_len, cfg.sample_packing, cfg.micro_batch_size,
                                    static_cast<uint64_t>(cfg.seed), epoch);
  std::vector<Batch> out;
  out.reserve(plan.batches.size());
  for (size_t b = 0; b < plan.batches.size(); ++b) {
    std::vector<const Example*> ptrs;
    for (size_t i : plan.batches[b]) ptrs.push_back(&examples[i]);
    Batch batch = batch_from_examples(ptrs);
    batch.rows = plan.rows_per_batch[b];
    out.push_back(std::move(batch));
  }
  return out;
}

RenderedExample render_preview(const Tokenizer& tok, const ChatTemplate* tpl, const DatasetRow& row,
                               bool train_on_inputs, int64_t sequence_len, int32_t eos_id, const ChatOptions& chat,
                               const VisionDataConfig* vision, const std::string& dataset_path) {
  RenderedExample r;
  r.source = row.source;
  if (row.kind == RowKind::kChat) {
    check(tpl != nullptr, row.source + ": chat rows need a chat template");
    const std::vector<std::string> images =
        vision ? chat_image_paths(row.messages, dataset_path, row.source) : std::vector<std::string>{};
    ChatEncoding enc = chat_encode(tok, *tpl, row.messages, row.tools, chat, train_on_inputs);
    r.text = std::move(enc.text);
    if (images.empty()) {
      r.ids = std::move(enc.ids);
      r.labels = std::move(enc.labels);
      r.token_starts = std::move(enc.token_starts);
      r.token_ends = std::move(enc.token_ends);
    } else {
      Example ex{std::move(enc.ids), std::move(enc.labels), {}};
      const std::vector<int32_t> rendered = ex.input_ids;
      example_expand_images(ex, images, vision, row.source);
      const auto image_token = static_cast<int32_t>(vision->vision.image_token_id);
      // Every placeholder copy points at the template's one placeholder in `text`.
      size_t image = 0;
      for (size_t t = 0; t < rendered.size(); ++t) {
        const int64_t copies =
            rendered[t] == image_token ? image_merged_tokens(ex.images[image++], vision->vision.merge_size) : 1;
        for (int64_t k = 0; k < copies; ++k) {
          r.token_starts.push_back(enc.token_starts[t]);
          r.token_ends.push_back(enc.token_ends[t]);
        }
      }
      if (sequence_len > 0 && static_cast<int64_t>(ex.input_ids.size()) > sequence_len) {
        r.truncated = true;
        example_truncate(ex, static_cast<size_t>(sequence_len), image_token,
                         static_cast<int32_t>(vision->vision.vision_start_token_id));
        r.token_starts.resize(ex.input_ids.size());
        r.token_ends.resize(ex.input_ids.size());
      }
      r.ids = std::move(ex.input_ids);
      r.labels = std::move(ex.labels);
      r.images = std::move(ex.images);
    }
  } else if (row.kind == RowKind::kCompletion) {
    r.text = row.text;
    r.ids = tok.encode_with_offsets(row.text, &r.token_starts, &r.token_ends);
    r.ids.push_back(eos_id);
    r.token_starts.push_back(static_cast<int64_t>(row.text.size()));
    r.token_ends.push_back(static_cast<int64_t>(row.text.size()));
    r.labels = r.ids;
  } else {
    Example ex = data_encode_row(tok, tpl, row, train_on_inputs, eos_id, chat);
    r.ids = std::move(ex.input_ids);
    r.labels = std::move(ex.labels);
  }
  if (sequence_len > 0 && static_cast<int64_t>(r.ids.size()) > sequence_len) {
    r.truncated = true;
    const auto n = static_cast<size_t>(sequence_len);
    r.ids.resize(n);
    r.labels.resize(n);
    if (r.token_starts.size() > n) r.token_starts.resize(n), r.token_ends.resize(n);
  }
  for (int32_t id : r.ids) r.pieces.push_back(id >= 0 ? tok.decode({id}) : std::string());
  return r;
}

}  // namespace deltatune
