// The training loop: data -> micro-batches -> forward/backward -> optimizer on the LoRA weights ->
// metrics, evaluation, checkpoints, final PEFT adapter. Runs synchronously on the caller's thread.
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "data/pipeline.h"
#include "deltatune/model_info.h"
#include "dist/data_parallel.h"
#include "dist/shard.h"
#include "io/files.h"
#include "deltatune/experiment_store.h"
#include "deltatune/trainer.h"
#include "lora/peft_io.h"
#include "model/moe_load_stats.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/backend_select.h"
#include "train/checkpoint_io.h"
#include "train/lora_spec.h"
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

// With data parallelism each worker evaluates every world-th batch and the sums are added up.
double evaluate_examples(Qwen35Model& model, LoraAdapter& adapter, const std::vector<Example>& eval,
                         const RunConfig& cfg, DataParallel* dp) {
  std::array<double, 2> sums{0, 0};  // loss, targets
  StepOptions so;
  so.fused_loss = cfg.fused_loss;
  const std::vector<Batch> batches = data_epoch_batches(eval, cfg, -1);
  for (size_t k = 0; k < batches.size(); ++k) {
    if (dp && static_cast<int>(k % static_cast<size_t>(dp->world())) != dp->rank()) continue;
    const StepOutput out = model.step(batches[k], &adapter, so);
    sums[0] += out.loss_sum;
    sums[1] += static_cast<double>(out.targets);
  }
  if (dp) dp->host().sum(sums);
  return sums[1] > 0 ? sums[0] / sums[1] : -1;
}

// FNV-1a over the F32 bytes of every A and B, in module order.
std::string lora_weights_hash(const LoraAdapter& adapter, Backend& be) {
  uint64_t h = 1469598103934665603ull;
  for (const LoraModule& m : adapter.modules)
    for (const Tensor* t : {&m.A, &m.B}) {
      const Tensor host = be.download(*t, DType::F32);
      const auto* p = static_cast<const unsigned char*>(host.data);
      for (size_t i = 0; i < host.nbytes(); ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
      }
    }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The GPU index this process trains on.
int training_gpu(const RunConfig& cfg, const TrainOptions& topts) {
  const std::vector<int>& ids = !topts.gpus.empty() ? topts.gpus : cfg.gpus;
  if (topts.dist.active()) return worker_gpu(topts.dist, ids, visible_cuda_devices());
  check(ids.size() <= 1, "gpus lists " + std::to_string(ids.size()) +
                             " GPUs, but this process is a single worker: start the run with `deltatune train` "
                             "(one worker per GPU) or a launcher such as torchrun or srun");
  return ids.empty() ? cfg.gpu : ids[0];
}

// Every worker must train the same config on the same data; the GPUs are recorded as the run's device.
// Returns "<n> workers: rank 0 (<host>, pid <pid>) <device> <GiB>; ...".
std::string check_workers_agree(DataParallel& dp, const RunConfig& cfg, const std::string& data_fp, Backend& be,
                                const std::function<void(LogLevel, const std::string&)>& log) {
  const MemoryStats ms = be.memory_stats();
  const std::string mine = run_config_hash(cfg) + "\n" + data_fp + "\n" + be.name() + "\n" +
                           std::to_string(ms.total_bytes);
  const std::vector<std::string> all = dp.host().all_gather(mine);
  auto field = [](const std::string& s, int i) {
    size_t b = 0;
    for (int k = 0; k < i; ++k) b = s.find('\n', b) + 1;
    return s.substr(b, s.find('\n', b) - b);
  };
  std::string summary = std::to_string(dp.world()) + " workers:";
  int64_t smallest = -1, largest = 0;
  int smallest_rank = 0;
  for (int r = 0; r < dp.world(); ++r) {
    const std::string& s = all[static_cast<size_t>(r)];
    check(field(s, 0) == field(all[0], 0),
          dp.host().describe(r) + " has another run config than rank 0 (hash " + field(s, 0) + " vs " +
              field(all[0], 0) + "): every worker must be started with the same run file");
    check(field(s, 1) == field(all[0], 1),
          dp.host().describe(r) + " read other training data than rank 0: the dataset files must be identical "
                                  "on every machine");
    const int64_t total = std::stoll(field(s, 3));
    summary += (r ? "; " : " ") + dp.host().describe(r) + " " + field(s, 2) + " " +
               std::to_string(total >> 30) + " GiB";
    if (smallest < 0 || total < smallest) smallest = total, smallest_rank = r;
    largest = std::max(largest, total);
  }
  if (smallest > 0 && smallest != largest) {
    std::string advice = "GPUs differ in memory (" + std::to_string(smallest >> 30) + " to " +
                         std::to_string(largest >> 30) +
                         " GiB): every worker trains micro-batches of the same shape, so the run must fit the "
                         "smallest, " + dp.host().describe(smallest_rank);
    try {
      const ModelInfo info = model_info_load(cfg.base_model);
      const VramEstimate est =
          estimate_vram(info, cfg.lora_r, cfg.micro_batch_size * cfg.sequence_len, cfg.fused_loss,
                        cfg.gradient_checkpointing, cfg.gradient_checkpointing_layers);
      advice += "; estimated peak " + std::to_string(est.total >> 30) + " GiB per GPU" +
                (est.total > smallest ? " does NOT fit it: lower micro_batch_size or sequence_len, or enable "
                                        "gradient_checkpointing"
                                      : "");
    } catch (const std::exception&) {
    }
    log(LogLevel::Warning, advice);
  }
  return summary;
}

std::string now_iso() {
  const auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

namespace {

std::string train_run_impl(const RunConfig& cfg_in, RunObserver& obs, RunControl& control, const TrainOptions& topts,
                           DataParallel* dp) {
  RunConfig cfg = cfg_in;
  auto log = [&](LogLevel lv, const std::string& m) { obs.on_log(lv, m); };
  const bool root = !dp || dp->root();  // the worker that writes the database, checkpoints and adapter
  const int world = dp ? dp->world() : 1;

  std::unique_ptr<ExperimentStore> store;
  if (root && topts.db_path != "-") {
    store = std::make_unique<ExperimentStore>(topts.db_path.empty() ? ExperimentStore::default_path() : topts.db_path);
    store->mark_crashed_runs();
  }

  // Resume: find the run and its newest complete checkpoint.
  std::optional<RunRecord> resumed;
  const bool resuming = !topts.resume_run.empty();
  if (resuming && root) {
    check(store != nullptr, "--resume needs the experiment database");
    resumed = store->find_run(topts.resume_run);
    check(resumed.has_value(), "--resume: no run '" + topts.resume_run + "' in " + store->path());
    // Claimed now, atomically, before anything is loaded: of two resumes of the same run started together
    // only one gets past here; the other fails without touching the output folder or the metrics.
    resumed = store->claim_run(resumed->id, static_cast<int64_t>(::getpid()));
    cfg = run_config_from_yaml_string(resumed->config_yaml, ".");
  }
  // The other workers train the config rank 0 resumes (they have no database of their own).
  if (resuming && dp) {
    const std::string yaml = dp->host().broadcast(root ? resumed->config_yaml : "");
    if (!root) cfg = run_config_from_yaml_string(yaml, ".");
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
                                       : peft_class_prefix(weights.key_prefix, cfg.model_class);
  std::string backend_note;
  auto be = backend_create(cfg.backend, training_gpu(cfg, topts), &backend_note, cfg.kernels);
  log(LogLevel::Info, "backend: " + be->name() + (backend_note.empty() ? "" : " (" + backend_note + ")"));
  std::string device = be->name();
  if (dp) {
    device = check_workers_agree(*dp, cfg, data_fp, *be, log);
    dp->connect_backend(*be);
    log(LogLevel::Info, "data parallel: " + device);
  }
  Qwen35Model model(weights, *be);
  lora_to_backend(adapter, *be);
  if (dp) dp->attach(adapter, int64_t(25) << 20);

  // The checkpoint to resume from, and how many micro-batches its steps took (the global batch stays that of
  // the run whatever the number of GPUs now).
  std::optional<std::string> ckpt;
  int64_t ckpt_global = 0;
  if (resumed) {
    ckpt = checkpoint_latest(cfg.output_dir);
    if (ckpt) {
      const TrainerState st = checkpoint_load(*ckpt).state;
      const auto g = st.extra.find("global_micro_batches");
      if (g != st.extra.end()) ckpt_global = std::stoll(g->second);
    }
  }
  if (resuming && dp) ckpt_global = std::stoll(dp->host().broadcast(std::to_string(ckpt_global)));
  const int64_t global = global_micro_batches(cfg.gradient_accumulation_steps, world, ckpt_global);
  per_worker_accumulation(global, world);  // refuses a GPU count that cannot keep the global batch
  const std::vector<int64_t> mine = shard_positions(global, dp ? dp->rank() : 0, world);

  BatchStream probe(data.train, cfg, {});
  const int64_t steps_per_epoch = std::max<int64_t>(1, (probe.per_epoch() + global - 1) / global);
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
      log(LogLevel::Info, "resuming run " + run_id + " from " + *ckpt + " at step " + std::to_string(step) +
                              (world > 1 || ckpt_global > 0
                                   ? " (" + std::to_string(global) + " micro-batches per step over " +
                                         std::to_string(world) + " GPU" + (world > 1 ? "s" : "") + ")"
                                   : ""));
    } else {
      log(LogLevel::Warning, "resuming run " + run_id + ": no checkpoint in " + cfg.output_dir + ", starting over");
    }
    // The run is ours since claim_run (status running, this pid); the summary follows the truncation.
    store->truncate_metrics(run_id, step);
    if (resumed->device != device) {
      resumed->device = device;
      auto r = store->find_run(run_id);
      if (r) {
        r->device = device;
        store->update_run(*r);
      }
    }
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
    r.device = device;
    r.total_steps = total_steps;
    r.pid = static_cast<int64_t>(::getpid());
    r.tags = cfg.tags;
    run_id = store->create_run(r);
  }
  if (dp) {
    // Every worker starts from rank 0's weights, moments and position.
    const std::string pos = dp->host().broadcast(std::to_string(step) + " " + std::to_string(cursor.epoch) + " " +
                                                 std::to_string(cursor.index) + " " + std::to_string(tokens_seen) +
                                                 " " + run_id);
    if (!root) {
      std::istringstream in(pos);
      in >> step >> cursor.epoch >> cursor.index >> tokens_seen >> run_id;
    }
    dp->broadcast_adapter(adapter);
  }
  release_guard.started = true;  // from here on a failure is the run's: marked failed below
  obs.on_started(run_id, total_steps);
  if (dp && root && store && !run_id.empty()) store->add_event(run_id, "info", "data parallel: " + device);
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
  // Rank 0 alone writes; the others go on (a failed write reaches them as a fault at the next exchange).
  auto save = [&](bool final_adapter) {
    if (!root) return;
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
    st.extra["global_micro_batches"] = std::to_string(global);
    st.extra["workers"] = std::to_string(world);
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
    if (root) check_dir_writable(cfg.output_dir, "output_dir");
    BatchStream stream(data.train, cfg, cursor);
    bool stop_agreed = false;  // data parallel: a stop asked on any worker, agreed at the last step's exchange
    if (dp && control.pause.load()) log(LogLevel::Warning, "pause is not available in a multi-GPU run");
    while (step < total_steps) {
      if (dp ? stop_agreed : control.stop.load()) {
        save(true);
        if (dp) dp->host().barrier();  // every worker ends after rank 0's checkpoint is safe
        event(LogLevel::Info, "stopped at step " + std::to_string(step) + "; checkpoint written");
        set_status("cancelled", last_loss, best_eval);
        obs.on_finished("cancelled", "stopped at step " + std::to_string(step));
        return run_id;
      }
      while (!dp && control.pause.load() && !control.stop.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));

      const auto t0 = Clock::now();
      if (dp) dp->zero_gradients();
      else lora_zero_grad(adapter, *be);
      // The step's micro-batches are those of a one-GPU run with `global` micro-batches per step; this worker
      // trains the positions `mine` of them (all of them without data parallelism).
      // Copies: a step that runs into the next epoch reloads the stream's batch list under earlier references.
      std::vector<Batch> micro;
      for (int64_t i = 0; i < global; ++i) micro.push_back(stream.next());
      int64_t targets = 0, tokens = 0;
      for (const Batch& b : micro) {
        targets += b.num_targets;
        tokens += static_cast<int64_t>(b.input_ids.size());
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
      for (size_t k = 0; k < mine.size(); ++k) {
        const int64_t pos = mine[k];
        so.lora.dropout_seed = step_seed(cfg.seed, step + 1, pos);
        // The last micro-batch's backward completes the gradients layer by layer: their sums start there.
        if (dp && k + 1 == mine.size()) so.on_layer_backward = [&](int layer) { dp->layer_done(layer); };
        const StepOutput out = model.step(micro[static_cast<size_t>(pos)], &adapter, so);
        loss_sum += out.loss_sum;
        if (out.moe_load.defined()) {
          if (!moe_load.defined()) moe_load = out.moe_load;
          else be->add(moe_load, out.moe_load, 1.f);
        }
      }
      double gnorm = 0;
      if (dp) {
        dp->finish_gradients();
        // One exchange per step: the global loss, any worker's stop, and rank 0's gradient norm (every worker
        // clips with the same number even where GPUs of another kind would round the norm differently).
        const double norm = lora_grad_norm(adapter, *be);
        std::array<double, 3> v{loss_sum, control.stop.load() ? 1.0 : 0.0, root ? norm : 0.0};
        dp->host().sum(v);
        loss_sum = v[0];
        stop_agreed = v[1] > 0;
        gnorm = v[2];
        if (moe_load.defined()) dp->sum_tensor(moe_load);
      } else {
        gnorm = lora_grad_norm(adapter, *be);
      }
      const double loss = targets > 0 ? loss_sum / static_cast<double>(targets) : 0.0;
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
      if (dp && topts.check_replicas) {
        const std::vector<std::string> hashes = dp->host().all_gather(lora_weights_hash(adapter, *be));
        for (int r = 1; r < world; ++r)
          check(hashes[static_cast<size_t>(r)] == hashes[0],
                "step " + std::to_string(step) + ": the LoRA weights of " + dp->host().describe(r) + " (hash " +
                    hashes[static_cast<size_t>(r)] + ") differ from rank 0's (" + hashes[0] + ")");
        log(LogLevel::Info, "step " + std::to_string(step) + ": LoRA weights hash " + hashes[0] + " on all " +
                                std::to_string(world) + " workers");
      }
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
        m.eval_loss = evaluate_examples(model, adapter, data.eval, cfg, dp);
        if (best_eval < 0 || m.eval_loss < best_eval) best_eval = m.eval_loss;
      }
      if (store) store->add_metrics(run_id, m);
      obs.on_step(m);
      if (cfg.save_steps > 0 && step % cfg.save_steps == 0 && !last) save(false);
    }
    save(true);
    if (dp) dp->host().barrier();  // every worker ends after rank 0's adapter is written
    set_status("finished", last_loss, best_eval);
    event(LogLevel::Info, "finished " + std::to_string(step) + " steps; adapter written to " + cfg.output_dir);
    obs.on_finished("finished", "adapter written to " + cfg.output_dir);
  } catch (const std::exception& e) {
    // Recording the failure is best effort: when the database fails too (e.g. the same full disk), the
    // original error is still the one reported; the run is then found `running` by a dead process and
    // marked crashed later. A fault of another worker (it died, hung or failed) ends the run as crashed:
    // resumable from its last checkpoint.
    const bool peer_fault = dynamic_cast<const DistFault*>(&e) != nullptr;
    try {
      event(LogLevel::Error, e.what());
    } catch (const std::exception&) {
    }
    try {
      set_status(peer_fault ? "crashed" : "failed", last_loss, best_eval);
    } catch (const std::exception&) {
    }
    obs.on_finished(peer_fault ? "crashed" : "failed", e.what());
    throw;
  }
  return run_id;
}

}  // namespace

std::string train_run(const RunConfig& cfg, RunObserver& obs, RunControl& control, const TrainOptions& topts) {
  if (!topts.dist.active()) return train_run_impl(cfg, obs, control, topts, nullptr);
  DataParallel dp(topts.dist);  // joins the other workers (or throws DistFault naming who is missing)
  try {
    return train_run_impl(cfg, obs, control, topts, &dp);
  } catch (const DistFault& e) {
    dp.fail(e.what());  // the fault came from elsewhere: passed on to any peer that has not heard yet
    throw;
  } catch (const std::exception& e) {
    dp.fail(dp.host().describe(dp.rank()) + ": " + e.what());
    throw;
  }
}

}  // namespace deltatune
