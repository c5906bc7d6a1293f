// The training steps of train_run (train_run_steps.h): micro-batches -> forward/backward -> gradient sum
// over the workers -> optimizer on the LoRA weights -> metrics, evaluation, checkpoints, final adapter.
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "core/error.h"
#include "dist/expert_lora.h"
#include "io/files.h"
#include "lora/peft_io.h"
#include "model/moe_load_stats.h"
#include "train/checkpoint_io.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/train_run_steps.h"
#include "train/train_run_util.h"
#include "data/batch_images.h"

namespace deltatune {
namespace {

using Clock = TrainSession::Clock;

// One optimizer step's forward and backward passes, before the update.
struct StepWork {
  Clock::time_point started;
  int64_t targets = 0, tokens = 0;  // over all the step's micro-batches (every worker's)
  double loss_sum = 0;              // summed over the workers
  double grad_norm = 0;
  Tensor moe_load;  // F32 [layers, E] on the device, summed over the micro-batches; undefined without MoE
  double loss() const { return targets > 0 ? loss_sum / static_cast<double>(targets) : 0.0; }
};

// Workers that generate together take rank 0's tokens (sent over the host connections, a few bytes a token),
// so that every worker runs the same forwards and stops at the same step. Empty for a model that generates alone.
std::function<void(std::vector<int32_t>&)> lockstep_token_agreement(TrainSession& s) {
  if (!s.dp || !s.model->lockstep()) return {};
  return [&s](std::vector<int32_t>& tokens) {
    const std::string mine(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
    const std::string root = s.dp->host().broadcast(mine);
    check(root.size() == mine.size(), "sample_prompts: rank 0 generated " + std::to_string(root.size() / 4) +
                                          " sequences, this worker " + std::to_string(tokens.size()));
    std::memcpy(tokens.data(), root.data(), root.size());
  };
}

// With data parallelism each worker evaluates every world-th batch and the sums are added up. Sharded weights
// make every forward a collective: then every worker runs as many forwards, the last round's missing batches
// replaced by batch 0 (not counted). So does expert parallel (every MoE layer exchanges tokens).
double evaluate_examples(TrainSession& s) {
  std::array<double, 2> sums{0, 0};  // loss, targets
  StepOptions so;
  so.fused_loss = s.cfg.fused_loss;
  so.loss_logits = s.loss_logits;
  std::vector<Batch> batches = data_epoch_batches(s.data.eval, s.cfg, -1);
  const size_t world = s.dp ? static_cast<size_t>(s.dp->world()) : 1;
  const size_t rounds = (batches.size() + world - 1) / world;
  const bool lockstep = s.model->lockstep();
  const Batch spare = lockstep && !batches.empty() ? batches[0] : Batch{};
  for (size_t k = 0; k < (lockstep ? rounds * world : batches.size()); ++k) {
    if (s.dp && static_cast<int>(k % world) != s.dp->rank()) continue;
    if (k >= batches.size()) {
      Batch b = spare;
      if (s.vision) batch_load_images(b, *s.vision);
      s.model->step(b, &s.adapter, so);
      continue;
    }
    if (s.vision) batch_load_images(batches[k], *s.vision);
    const StepOutput out = s.model->step(batches[k], &s.adapter, so);
    sums[0] += out.loss_sum;
    sums[1] += static_cast<double>(out.targets);
  }
  if (s.dp) s.dp->host().sum(sums);
  return sums[1] > 0 ? sums[0] / sums[1] : -1;
}

// A checkpoint (and with final_adapter the run's PEFT adapter). Rank 0 alone writes; the others go on (a
// failed write reaches them as a fault at the next exchange). Under expert parallel every worker first sends
// rank 0 its experts' LoRA slices and moments, so the checkpoint and adapter hold the full modules.
void save_checkpoint(TrainSession& s, bool final_adapter) {
  std::optional<LoraAdapter> joined;
  if (s.dp && s.dp->expert_parallel()) joined = s.dp->gather_adapter_to_root(s.adapter);
  if (!s.root) return;
  TrainerState st;
  st.step = s.step;
  st.total_steps = s.total_steps;
  st.epoch_index = s.cursor.epoch;
  st.micro_batch_index = s.cursor.index;
  st.scheduler_step = s.step;
  st.tokens_seen = s.tokens_seen;
  st.wall_seconds = s.wall_offset + std::chrono::duration<double>(Clock::now() - s.t_start).count();
  st.best_eval_loss = s.best_eval;
  st.run_id = s.run_id;
  st.seed = s.cfg.seed;
  st.extra["data_fingerprint"] = s.data_fp;
  st.extra["global_micro_batches"] = std::to_string(s.global);
  st.extra["workers"] = std::to_string(s.world);
  const std::string path =
      joined ? checkpoint_save_host(s.cfg.output_dir, st, *joined, s.model_config(), s.class_prefix, s.cfg.base_model,
                                    s.cfg.save_total_limit)
             : checkpoint_save(s.cfg.output_dir, st, s.adapter, *s.be, s.model_config(), s.class_prefix,
                               s.cfg.base_model, s.cfg.save_total_limit);
  s.obs.on_checkpoint(s.step, path);
  if (s.store && !s.run_id.empty()) s.store->add_artifact({s.run_id, "checkpoint", path, s.step, now_iso()});
  if (final_adapter) {
    const LoraAdapter host = joined ? *joined : lora_download(s.adapter, *s.be);
    peft_adapter_write(host, s.model_config(), s.class_prefix, s.cfg.base_model, s.cfg.output_dir);
    if (s.store && !s.run_id.empty())
      s.store->add_artifact({s.run_id, "adapter", s.cfg.output_dir, s.step, now_iso()});
  }
}

// A stop asked by the user: checkpoint and adapter, then the run ends as cancelled.
void stop_run(TrainSession& s) {
  save_checkpoint(s, true);
  if (s.dp) s.dp->host().barrier();  // every worker ends after rank 0's checkpoint is safe
  s.event(LogLevel::Info, "stopped at step " + std::to_string(s.step) + "; checkpoint written");
  s.set_status("cancelled");
  s.obs.on_finished("cancelled", "stopped at step " + std::to_string(s.step));
}

// The step's micro-batches are those of a one-GPU run with `global` micro-batches per step; this worker
// trains the positions `mine` of them (all of them without data parallelism). The gradients, loss, a stop
// asked on any worker (-> stop_agreed) and rank 0's gradient norm are summed over the workers.
StepWork forward_backward(TrainSession& s, BatchStream& stream, bool& stop_agreed) {
  StepWork w;
  w.started = Clock::now();
  if (s.dp) s.dp->zero_gradients();
  else lora_zero_grad(s.adapter, *s.be);
  // Copies: a step that runs into the next epoch reloads the stream's batch list under earlier references.
  std::vector<Batch> micro;
  for (int64_t i = 0; i < s.global; ++i) micro.push_back(stream.next());
  if (s.vision)
    for (const int64_t pos : s.mine) batch_load_images(micro[static_cast<size_t>(pos)], *s.vision);
  for (const Batch& b : micro) {
    w.targets += b.num_targets;
    w.tokens += static_cast<int64_t>(b.input_ids.size());
  }
  StepOptions so;
  so.backward = true;
  so.grad_scale = w.targets > 0 ? 1.f / static_cast<float>(w.targets) : 0.f;
  so.fused_loss = s.cfg.fused_loss;
  so.loss_logits = s.loss_logits;
  so.gradient_checkpointing = s.checkpointing;
  so.checkpoint_layers = s.checkpoint_layers;
  so.keep = s.keep;
  so.loss_chunk_rows = s.loss_chunk_rows;
  so.lora.training = true;
  so.lora.dropout = static_cast<float>(s.adapter.dropout);
  for (size_t k = 0; k < s.mine.size(); ++k) {
    const int64_t pos = s.mine[k];
    so.lora.dropout_seed = step_seed(s.cfg.seed, s.step + 1, pos);
    // The last micro-batch's backward completes the gradients layer by layer: their sums start there.
    if (s.dp && k + 1 == s.mine.size()) so.on_layer_backward = [&](int layer) { s.dp->layer_done(layer); };
    const StepOutput out = s.model->step(micro[static_cast<size_t>(pos)], &s.adapter, so);
    w.loss_sum += out.loss_sum;
    if (out.moe_load.defined()) {
      if (!w.moe_load.defined()) w.moe_load = out.moe_load;
      else s.be->add(w.moe_load, out.moe_load, 1.f);
    }
  }
  if (s.dp) {
    s.dp->finish_gradients();
    // One exchange per step: the global loss, any worker's stop, and rank 0's gradient norm (every worker
    // clips with the same number even where GPUs of another kind would round the norm differently).
    // Expert parallel: each worker's experts add their part (dist/data_parallel.h expert_parallel_grad_sq).
    const double norm = lora_grad_norm(s.adapter, *s.be);
    std::array<double, 3> v{w.loss_sum, s.control.stop.load() ? 1.0 : 0.0, s.root ? norm : 0.0};
    s.dp->host().sum(v);
    w.loss_sum = v[0];
    stop_agreed = v[1] > 0;
    w.grad_norm = s.dp->expert_parallel() ? std::sqrt(s.dp->expert_parallel_grad_sq(s.adapter, v[2] * v[2])) : v[2];
    if (w.moe_load.defined()) s.dp->sum_tensor(w.moe_load);
  } else {
    w.grad_norm = lora_grad_norm(s.adapter, *s.be);
  }
  return w;
}

// The optimizer update at the step's learning rate (returned); with --check-replicas every worker's LoRA
// weights must hash alike afterwards.
double apply_update(TrainSession& s, const StepWork& w) {
  const OptimizerSettings os{s.cfg.optimizer,    s.cfg.adam_beta1,   s.cfg.adam_beta2,
                             s.cfg.adam_epsilon, s.cfg.weight_decay, s.cfg.max_grad_norm};
  const double lr = lr_at_step(s.cfg.lr_scheduler, s.cfg.learning_rate, s.step, s.warmup, s.total_steps);
  optimizer_step(s.adapter, *s.be, os, lr, s.step, w.grad_norm);
  s.be->synchronize();
  if (s.dp && s.topts.check_replicas) {
    // Expert parallel: the experts' slices differ by design; the rest must agree.
    LoraAdapter replicated = s.adapter;
    if (s.dp->expert_parallel())
      std::erase_if(replicated.modules, [](const LoraModule& m) { return is_expert_lora(m); });
    const std::vector<std::string> hashes = s.dp->host().all_gather(lora_weights_hash(replicated, *s.be));
    for (int r = 1; r < s.world; ++r)
      check(hashes[static_cast<size_t>(r)] == hashes[0],
            "step " + std::to_string(s.step) + ": the LoRA weights of " + s.dp->host().describe(r) + " (hash " +
                hashes[static_cast<size_t>(r)] + ") differ from rank 0's (" + hashes[0] + ")");
    s.log(LogLevel::Info, "step " + std::to_string(s.step) + ": LoRA weights hash " + hashes[0] + " on all " +
                              std::to_string(s.world) + " workers");
  }
  return lr;
}

// The step's metrics (with the evaluation loss on eval steps and the last step) to the database and the
// observer; a checkpoint every save_steps.
void record_step(TrainSession& s, const StepWork& w, double lr, const BatchStream& stream) {
  const double secs = std::chrono::duration<double>(Clock::now() - w.started).count();
  s.last_loss = w.loss();

  StepMetrics m;
  m.step = s.step;
  m.total_steps = s.total_steps;
  m.epoch = static_cast<double>(s.cursor.epoch) +
            static_cast<double>(s.cursor.index) / static_cast<double>(std::max<int64_t>(1, stream.per_epoch()));
  m.loss = w.loss();
  m.lr = lr;
  m.grad_norm = w.grad_norm;
  m.tokens_per_second = secs > 0 ? static_cast<double>(w.tokens) / secs : 0;
  m.tokens_seen = s.tokens_seen;
  m.trained_tokens = w.targets;
  const MemoryStats ms = s.be->memory_stats();
  m.vram_allocated = ms.allocated_bytes;
  m.vram_reserved = ms.reserved_bytes;
  m.wall_seconds = s.wall_offset + std::chrono::duration<double>(Clock::now() - s.t_start).count();
  if (w.moe_load.defined()) {  // after the step's synchronize: one small download per step
    const MoeLoadStats ls = moe_load_stats(s.be->download(w.moe_load, DType::F32));
    m.moe_load_max_ratio = ls.max_ratio;
    m.moe_load_cv = ls.cv;
  }
  const bool last = s.step == s.total_steps;
  if (!s.data.eval.empty() && ((s.cfg.eval_steps > 0 && s.step % s.cfg.eval_steps == 0) || last)) {
    m.eval_loss = evaluate_examples(s);
    if (s.best_eval < 0 || m.eval_loss < s.best_eval) s.best_eval = m.eval_loss;
  }
  if (s.store) s.store->add_metrics(s.run_id, m);
  const bool eval_step = (s.cfg.eval_steps > 0 && s.step % s.cfg.eval_steps == 0) || last;
  // Stored before on_step, so an observer finds them. Rank 0 generates; with sharded weights or expert parallel
  // every forward is a collective, so every worker generates with it and takes its tokens.
  if (eval_step && !s.samples.empty() && (s.root || s.model->lockstep())) {
    std::vector<SampleRecord> gen =
        sample_prompts_generate(s.samples, *s.model, s.adapter, s.step, lockstep_token_agreement(s));
    if (s.root && s.store) s.store->add_samples(s.run_id, gen);
  }
  s.obs.on_step(m);
  if (s.cfg.save_steps > 0 && s.step % s.cfg.save_steps == 0 && !last) save_checkpoint(s, false);
}

// The last step is done: the adapter, then the run ends as finished.
void finish_run(TrainSession& s) {
  save_checkpoint(s, true);
  if (s.dp) s.dp->host().barrier();  // every worker ends after rank 0's adapter is written
  s.set_status("finished");
  s.event(LogLevel::Info,
          "finished " + std::to_string(s.step) + " steps; adapter written to " + s.cfg.output_dir);
  s.obs.on_finished("finished", "adapter written to " + s.cfg.output_dir);
}

// Recording the failure is best effort: when the database fails too (e.g. the same full disk), the original
// error is still the one reported; the run is then found `running` by a dead process and marked crashed
// later. A fault of another worker (it died, hung or failed) ends the run as crashed: resumable from its last
// checkpoint.
void record_failure(TrainSession& s, const std::exception& e) {
  const bool peer_fault = dynamic_cast<const DistFault*>(&e) != nullptr;
  try {
    s.event(LogLevel::Error, e.what());
  } catch (const std::exception&) {
  }
  try {
    s.set_status(peer_fault ? "crashed" : "failed");
  } catch (const std::exception&) {
  }
  s.obs.on_finished(peer_fault ? "crashed" : "failed", e.what());
}

}  // namespace

std::string train_steps(TrainSession& s) {
  s.release_guard.started = true;  // from here on a failure is the run's: marked failed below
  s.obs.on_started(s.run_id, s.total_steps);
  if (s.dp && s.root && s.store && !s.run_id.empty())
    s.store->add_event(s.run_id, "info", "data parallel: " + s.device);
  s.t_start = Clock::now();
  try {
    // A read-only or unusable output folder fails now, not at the first checkpoint hours later.
    if (s.root) check_dir_writable(s.cfg.output_dir, "output_dir");
    BatchStream stream(s.data.train, s.cfg, s.cursor);
    bool stop_agreed = false;  // data parallel: a stop asked on any worker, agreed at the last step's exchange
    if (s.dp && s.control.pause.load()) s.log(LogLevel::Warning, "pause is not available in a multi-GPU run");
    while (s.step < s.total_steps) {
      if (s.dp ? stop_agreed : s.control.stop.load()) {
        stop_run(s);
        return s.run_id;
      }
      while (!s.dp && s.control.pause.load() && !s.control.stop.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));

      const StepWork w = forward_backward(s, stream, stop_agreed);
      ++s.step;
      s.tokens_seen += w.tokens;
      s.cursor = stream.cursor();
      if (!std::isfinite(w.loss()) || !std::isfinite(w.grad_norm)) {
        const std::string what = "step " + std::to_string(s.step) + ": " +
                                 (!std::isfinite(w.loss()) ? "loss" : "gradient norm") +
                                 " is not finite; the update was not applied";
        if (s.cfg.nan_policy == "skip") {
          s.event(LogLevel::Warning, what + " (nan_policy: skip)");
          continue;
        }
        throw Error(what + " (lower learning_rate, or set nan_policy: skip)");
      }
      const double lr = apply_update(s, w);
      record_step(s, w, lr, stream);
    }
    finish_run(s);
  } catch (const std::exception& e) {
    record_failure(s, e);
    throw;
  }
  return s.run_id;
}

}  // namespace deltatune
