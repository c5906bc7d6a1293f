// The training loop: data -> micro-batches -> forward/backward -> optimizer on the LoRA weights ->
// metrics, evaluation, checkpoints, final PEFT adapter. Runs synchronously on the caller's thread.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "data/pipeline.h"
#include "io/files.h"
#include "deltatune/experiment_store.h"
#include "deltatune/trainer.h"
#include "lora/peft_io.h"
#include "model/moe_load_stats.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/backend_select.h"
#include "train/checkpoint_io.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

using Clock = std::chrono::steady_clock;

// Position in the stream of micro-batches: epoch and index within that epoch's batch list.
struct DataCursor {
  int64_t epoch = 0;
  int64_t index = 0;
};

class BatchStream {
 public:
  BatchStream(const std::vector<Example>& examples, const RunConfig& cfg, DataCursor start)
      : examples_(examples), cfg_(cfg), cur_(start) {
    load();
  }
  const Batch& next() {
    if (cur_.index >= static_cast<int64_t>(batches_.size())) {
      ++cur_.epoch;
      cur_.index = 0;
      load();
    }
    return batches_[static_cast<size_t>(cur_.index++)];
  }
  DataCursor cursor() const { return cur_; }
  int64_t per_epoch() const { return static_cast<int64_t>(batches_.size()); }

 private:
  void load() {
    batches_ = data_epoch_batches(examples_, cfg_, cur_.epoch);
    check(!batches_.empty(), "datasets: no training batches (every example was dropped?)");
  }
  const std::vector<Example>& examples_;
  const RunConfig& cfg_;
  DataCursor cur_;
  std::vector<Batch> batches_;
};

uint64_t step_seed(int64_t seed, int64_t step, int64_t micro) {
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(step) << 20) ^
               static_cast<uint64_t>(micro);
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 29);
}

std::string describe_groups(const LoraAdapter& a) {
  std::ostringstream os;
  os << "trainable LoRA parameters: " << a.trainable_params() << " (";
  bool first = true;
  for (const auto& [g, n] : a.params_per_group()) {
    os << (first ? "" : ", ") << g << " " << n;
    first = false;
  }
  os << ") in " << a.modules.size() << " modules, r=" << a.r << ", alpha=" << a.alpha;
  return os.str();
}

double evaluate_examples(Qwen35Model& model, LoraAdapter& adapter, const std::vector<Example>& eval,
                         const RunConfig& cfg) {
  double loss = 0;
  int64_t n = 0;
  StepOptions so;
  so.fused_loss = cfg.fused_loss;
  for (const Batch& b : data_epoch_batches(eval, cfg, -1)) {
    const StepOutput out = model.step(b, &adapter, so);
    loss += out.loss_sum;
    n += out.targets;
  }
  return n > 0 ? loss / static_cast<double>(n) : -1;
}

std::string now_iso() {
  const auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string train_run(const RunConfig& cfg_in, RunObserver& obs, RunControl& control, const TrainOptions& topts) {
  RunConfig cfg = cfg_in;
  auto log = [&](LogLevel lv, const std::string& m) { obs.on_log(lv, m); };

  std::unique_ptr<ExperimentStore> store;
  if (topts.db_path != "-") {
    store = std::make_unique<ExperimentStore>(topts.db_path.empty() ? ExperimentStore::default_path() : topts.db_path);
    store->mark_crashed_runs();
  }

  // Resume: find the run and its newest complete checkpoint.
  std::optional<RunRecord> resumed;
  if (!topts.resume_run.empty()) {
    check(store != nullptr, "--resume needs the experiment database");
    resumed = store->find_run(topts.resume_run);
    check(resumed.has_value(), "--resume: no run '" + topts.resume_run + "' in " + store->path());
    // Claimed now, atomically, before anything is loaded: of two resumes of the same run started together
    // only one gets past here; the other fails without touching the output folder or the metrics.
    resumed = store->claim_run(resumed->id, static_cast<int64_t>(::getpid()));
    cfg = run_config_from_yaml_string(resumed->config_yaml, ".");
  }
  // A resume that cannot start leaves the run as it was (still resumable once the cause is fixed) and
  // says why in the run's events.
  auto note_resume_failure = [&](const std::string& why) {
    if (!resumed) return;
    try {
      store->add_event(resumed->id, "error", "resume failed: " + why);
    } catch (const std::exception&) {
      // The database itself failing must not hide the reason the resume failed.
    }
  };
  // Until training starts, any failure gives the claimed run back with its previous status.
  struct ReleaseUnlessStarted {
    ExperimentStore* store = nullptr;
    const RunRecord* before = nullptr;
    bool started = false;
    ~ReleaseUnlessStarted() {
      if (started || !store || !before) return;
      try {
        store->release_run(*before, static_cast<int64_t>(::getpid()));
      } catch (const std::exception&) {
        // Left running by a process that ends: marked crashed (still resumable) by the next reader.
      }
    }
  } release_guard{store.get(), resumed ? &*resumed : nullptr};
  check(!cfg.base_model.empty(), "run config: base_model is empty (expected a Hugging Face checkpoint folder)");
  check(!cfg.datasets.empty(), "run config: datasets is empty (expected at least one {path, type})");

  // Everything that can be wrong with the inputs fails here, before any training.
  ModelWeights weights = model_weights_load(cfg.base_model);
  const ModelConfig& mc = weights.config;
  LoraAdapter adapter;
  if (!cfg.lora_model_dir.empty()) {
    adapter = peft_adapter_read(cfg.lora_model_dir, mc);
    log(LogLevel::Info, "starting from the adapter in " + cfg.lora_model_dir);
  } else {
    adapter = lora_create(mc, lora_spec_from_run_config(cfg), static_cast<uint64_t>(cfg.seed));
  }
  log(LogLevel::Info, describe_groups(adapter));
  PreparedData data;
  try {
    data = data_prepare(cfg, [&](const std::string& m) { log(LogLevel::Info, m); });
  } catch (const std::exception& e) {
    note_resume_failure(e.what());
    throw;
  }
  check(!data.train.empty(), "datasets: no training examples left after filtering");
  // Everything is read and tokenized now: the dataset files may change or vanish during the run without
  // affecting it. The fingerprint goes into every checkpoint for the resume check below.
  const std::string data_fp = data_fingerprint(data.train);

  // A run that starts from a PEFT adapter writes its adapters for that adapter's class (the keys PEFT expects
  // there), unless model_class names one.
  const std::string class_prefix = (cfg.model_class == "auto" || cfg.model_class.empty()) &&
                                           !adapter.class_prefix.empty()
                                       ? adapter.class_prefix
                                       : peft_class_prefix(weights, cfg.model_class);
  std::string backend_note;
  auto be = backend_create(cfg.backend, cfg.gpu, &backend_note);
  log(LogLevel::Info, "backend: " + be->name() + (backend_note.empty() ? "" : " (" + backend_note + ")"));
  Qwen35Model model(weights, *be);
  lora_to_backend(adapter, *be);

  BatchStream probe(data.train, cfg, {});
  const int64_t accum = std::max<int64_t>(1, cfg.gradient_accumulation_steps);
  const int64_t steps_per_epoch = std::max<int64_t>(1, (probe.per_epoch() + accum - 1) / accum);
  const int64_t total_steps = cfg.max_steps > 0
                                  ? cfg.max_steps
                                  : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cfg.num_epochs * steps_per_epoch)));
  const int64_t warmup = cfg.warmup_steps > 0 ? cfg.warmup_steps
                                              : static_cast<int64_t>(std::ceil(cfg.warmup_ratio * total_steps));

  // Run record.
  std::string run_id;
  int64_t step = 0;
  DataCursor cursor;
  int64_t tokens_seen = 0;
  double wall_offset = 0;
  OptimizerSettings os{cfg.optimizer, cfg.adam_beta1, cfg.adam_beta2, cfg.adam_epsilon, cfg.weight_decay,
                       cfg.max_grad_norm};
  if (resumed) {
    run_id = resumed->id;
    const auto ckpt = checkpoint_latest(cfg.output_dir);
    if (ckpt) {
      TrainerState st = checkpoint_restore(*ckpt, adapter, *be, mc);
      const auto fp = st.extra.find("data_fingerprint");
      if (fp != st.extra.end() && fp->second != data_fp) {
        std::string files;
        for (const auto& d : cfg.datasets) files += (files.empty() ? "" : ", ") + d.path;
        const std::string why = "the training data (" + files + ") changed since " + *ckpt +
                                " was written; its data position would point into different examples. "
                                "Restore the dataset files, or start a new run";
        note_resume_failure(why);
        throw Error("--resume: " + why);
      }
      step = st.step;
      cursor = {st.epoch_index, st.micro_batch_index};
      tokens_seen = st.tokens_seen;
      wall_offset = st.wall_seconds;
      log(LogLevel::Info, "resuming run " + run_id + " from " + *ckpt + " at step " + std::to_string(step));
    } else {
      log(LogLevel::Warning, "resuming run " + run_id + ": no checkpoint in " + cfg.output_dir + ", starting over");
    }
    // The run is ours since claim_run (status running, this pid); the summary follows the truncation.
    store->truncate_metrics(run_id, step);
  } else if (store) {
    RunRecord r;
    r.name = cfg.run_name.empty() ? fs::path(cfg.output_dir).filename().string() : cfg.run_name;
    r.status = "running";
    r.created_at = now_iso();
    r.model = cfg.base_model;
    for (const auto& d : cfg.datasets) r.datasets += (r.datasets.empty() ? "" : ",") + d.path;
    r.config_yaml = run_config_to_yaml(cfg);
    r.output_dir = cfg.output_dir;
    r.engine_version = DT_VERSION;
    r.device = be->name();
    r.total_steps = total_steps;
    r.pid = static_cast<int64_t>(::getpid());
    r.tags = cfg.tags;
    run_id = store->create_run(r);
  }
  release_guard.started = true;  // from here on a failure is the run's: marked failed below
  obs.on_started(run_id, total_steps);
  auto event = [&](LogLevel lv, const std::string& m) {
    log(lv, m);
    if (store && !run_id.empty())
      store->add_event(run_id, lv == LogLevel::Error ? "error" : lv == LogLevel::Warning ? "warning" : "info", m);
  };
  auto set_status = [&](const std::string& status, double final_loss, double best_eval) {
    if (!store || run_id.empty()) return;
    auto r = store->find_run(run_id);
    if (!r) return;
    r->status = status;
    r->finished_at = now_iso();
    r->steps = step;
    if (final_loss >= 0) r->final_loss = final_loss;
    if (best_eval >= 0) r->best_eval_loss = best_eval;
    store->update_run(*r);
  };

  const auto t_start = Clock::now();
  double last_loss = -1, best_eval = -1;
  auto save = [&](bool final_adapter) {
    TrainerState st;
    st.step = step;
    st.total_steps = total_steps;
    st.epoch_index = cursor.epoch;
    st.micro_batch_index = cursor.index;
    st.scheduler_step = step;
    st.tokens_seen = tokens_seen;
    st.wall_seconds = wall_offset + std::chrono::duration<double>(Clock::now() - t_start).count();
    st.best_eval_loss = best_eval;
    st.run_id = run_id;
    st.seed = cfg.seed;
    st.extra["data_fingerprint"] = data_fp;
    const std::string path = checkpoint_save(cfg.output_dir, st, adapter, *be, mc, class_prefix, cfg.base_model,
                                             cfg.save_total_limit);
    obs.on_checkpoint(step, path);
    if (store && !run_id.empty()) store->add_artifact({run_id, "checkpoint", path, step, now_iso()});
    if (final_adapter) {
      LoraAdapter host = lora_download(adapter, *be);
      peft_adapter_write(host, mc, class_prefix, cfg.base_model, cfg.output_dir);
      if (store && !run_id.empty()) store->add_artifact({run_id, "adapter", cfg.output_dir, step, now_iso()});
    }
  };

  try {
    // A read-only or unusable output folder fails now, not at the first checkpoint hours later.
    check_dir_writable(cfg.output_dir, "output_dir");
    BatchStream stream(data.train, cfg, cursor);
    while (step < total_steps) {
      if (control.stop.load()) {
        save(true);
        event(LogLevel::Info, "stopped at step " + std::to_string(step) + "; checkpoint written");
        set_status("cancelled", last_loss, best_eval);
        obs.on_finished("cancelled", "stopped at step " + std::to_string(step));
        return run_id;
      }
      while (control.pause.load() && !control.stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));

      const auto t0 = Clock::now();
      lora_zero_grad(adapter, *be);
      std::vector<const Batch*> micro;
      for (int64_t i = 0; i < accum; ++i) micro.push_back(&stream.next());
      int64_t targets = 0, tokens = 0;
      for (const Batch* b : micro) {
        targets += b->num_targets;
        tokens += static_cast<int64_t>(b->input_ids.size());
      }
      double loss_sum = 0;
      StepOptions so;
      so.backward = true;
      so.grad_scale = targets > 0 ? 1.f / static_cast<float>(targets) : 0.f;
      so.fused_loss = cfg.fused_loss;
      so.gradient_checkpointing = cfg.gradient_checkpointing;
      so.checkpoint_layers = cfg.gradient_checkpointing_layers;
      so.lora.training = true;
      so.lora.dropout = static_cast<float>(adapter.dropout);
      Tensor moe_load;  // F32 [layers, E] on the device, summed over the micro-batches
      for (size_t i = 0; i < micro.size(); ++i) {
        so.lora.dropout_seed = step_seed(cfg.seed, step + 1, static_cast<int64_t>(i));
        const StepOutput out = model.step(*micro[i], &adapter, so);
        loss_sum += out.loss_sum;
        if (out.moe_load.defined()) {
          if (!moe_load.defined()) moe_load = out.moe_load;
          else be->add(moe_load, out.moe_load, 1.f);
        }
      }
      const double loss = targets > 0 ? loss_sum / static_cast<double>(targets) : 0.0;
      const double gnorm = lora_grad_norm(adapter, *be);
      ++step;
      tokens_seen += tokens;
      cursor = stream.cursor();
      if (!std::isfinite(loss) || !std::isfinite(gnorm)) {
        const std::string what = "step " + std::to_string(step) + ": " + (!std::isfinite(loss) ? "loss" : "gradient norm") +
                                 " is not finite; the update was not applied";
        if (cfg.nan_policy == "skip") {
          event(LogLevel::Warning, what + " (nan_policy: skip)");
          continue;
        }
        throw Error(what + " (lower learning_rate, or set nan_policy: skip)");
      }
      const double lr = lr_at_step(cfg.lr_scheduler, cfg.learning_rate, step, warmup, total_steps);
      optimizer_step(adapter, *be, os, lr, step, gnorm);
      be->synchronize();
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      last_loss = loss;

      StepMetrics m;
      m.step = step;
      m.total_steps = total_steps;
      m.epoch = static_cast<double>(cursor.epoch) +
                static_cast<double>(cursor.index) / static_cast<double>(std::max<int64_t>(1, stream.per_epoch()));
      m.loss = loss;
      m.lr = lr;
      m.grad_norm = gnorm;
      m.tokens_per_second = secs > 0 ? static_cast<double>(tokens) / secs : 0;
      m.tokens_seen = tokens_seen;
      m.trained_tokens = targets;
      const MemoryStats ms = be->memory_stats();
      m.vram_allocated = ms.allocated_bytes;
      m.vram_reserved = ms.reserved_bytes;
      m.wall_seconds = wall_offset + std::chrono::duration<double>(Clock::now() - t_start).count();
      if (moe_load.defined()) {  // after the step's synchronize: one small download per step
        const MoeLoadStats ls = moe_load_stats(be->download(moe_load, DType::F32));
        m.moe_load_max_ratio = ls.max_ratio;
        m.moe_load_cv = ls.cv;
      }
      const bool last = step == total_steps;
      if (!data.eval.empty() && ((cfg.eval_steps > 0 && step % cfg.eval_steps == 0) || last)) {
        m.eval_loss = evaluate_examples(model, adapter, data.eval, cfg);
        if (best_eval < 0 || m.eval_loss < best_eval) best_eval = m.eval_loss;
      }
      if (store) store->add_metrics(run_id, m);
      obs.on_step(m);
      if (cfg.save_steps > 0 && step % cfg.save_steps == 0 && !last) save(false);
    }
    save(true);
    set_status("finished", last_loss, best_eval);
    event(LogLevel::Info, "finished " + std::to_string(step) + " steps; adapter written to " + cfg.output_dir);
    obs.on_finished("finished", "adapter written to " + cfg.output_dir);
  } catch (const std::exception& e) {
    // Recording the failure is best effort: when the database fails too (e.g. the same full disk), the
    // original error is still the one reported; the run is then found `running` by a dead process and
    // marked crashed later.
    try {
      event(LogLevel::Error, e.what());
    } catch (const std::exception&) {
    }
    try {
      set_status("failed", last_loss, best_eval);
    } catch (const std::exception&) {
    }
    obs.on_finished("failed", e.what());
    throw;
  }
  return run_id;
}

}  // namespace deltatune
