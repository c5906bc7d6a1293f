// The steps of train_run before the first training step (train_run_steps.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "core/quantized.h"
#include "deltatune/gpu_info.h"
#include "deltatune/memory_plan.h"
#include "deltatune/model_info.h"
#include "dist/shard.h"
#include "lora/peft_io.h"
#include "train/backend_select.h"
#include "train/checkpoint.h"
#include "train/checkpoint_io.h"
#include "train/lora_spec.h"
#include "train/train_run_steps.h"
#include "train/train_run_util.h"
#include "train/weight_layout_select.h"
#include "vision/vision_tower.h"

namespace fs = std::filesystem;

namespace deltatune {

void open_experiment_store(TrainSession& s) {
  if (!s.root || s.topts.db_path == "-") return;
  s.store = std::make_unique<ExperimentStore>(s.topts.db_path.empty() ? ExperimentStore::default_path()
                                                                      : s.topts.db_path);
  s.store->mark_crashed_runs();
}

void claim_resumed_run(TrainSession& s) {
  if (s.resuming && s.root) {
    check(s.store != nullptr, "--resume needs the experiment database");
    s.resumed = s.store->find_run(s.topts.resume_run);
    check(s.resumed.has_value(), "--resume: no run '" + s.topts.resume_run + "' in " + s.store->path());
    // Claimed now, atomically, before anything is loaded: of two resumes of the same run started together
    // only one gets past here; the other fails without touching the output folder or the metrics.
    s.resumed = s.store->claim_run(s.resumed->id, static_cast<int64_t>(::getpid()));
    s.cfg = run_config_from_yaml_string(s.resumed->config_yaml, ".");
  }
  // The other workers train the config rank 0 resumes (they have no database of their own).
  if (s.resuming && s.dp) {
    const std::string yaml = s.dp->host().broadcast(s.root ? s.resumed->config_yaml : "");
    if (!s.root) s.cfg = run_config_from_yaml_string(yaml, ".");
  }
  // Until training starts, any failure gives the claimed run back with its previous status.
  s.release_guard.store = s.store.get();
  s.release_guard.before = s.resumed ? &*s.resumed : nullptr;
}

void check_new_output_dir(TrainSession& s) {
  if (s.resuming || !s.root) return;
  const std::string held = run_files_in(s.cfg.output_dir, true);
  if (held.empty()) return;
  // The run these files belong to, when this database knows it: unless it finished, the one to resume
  // instead.
  std::string owner, resume;
  std::error_code ec;
  const fs::path here = fs::weakly_canonical(s.cfg.output_dir, ec);
  if (s.store)
    for (const RunRecord& r : s.store->list_runs())  // newest first
      if (fs::weakly_canonical(r.output_dir, ec) == here) {
        owner = " of run " + r.id + ", " + r.status;
        if (r.status != "finished")
          resume = ", continue run " + r.id + " with `deltatune train --resume " + r.id + "`";
        break;
      }
  throw Error("output_dir " + s.cfg.output_dir + " already holds the output" + owner + " (" + held +
              "): a new run there would replace its adapter and checkpoints; choose another output_dir" +
              resume + " or remove the folder");
}

void load_inputs(TrainSession& s) {
  const RunConfig& cfg = s.cfg;
  check(!cfg.base_model.empty(), "run config: base_model is empty (expected a Hugging Face checkpoint folder)");
  check(!cfg.datasets.empty(), "run config: datasets is empty (expected at least one {path, type})");

  s.weights = model_weights_load(cfg.base_model);
  const QuantFormat asked = quant_format_from_name(cfg.base_quantization, "run config: base_quantization");
  if (s.weights.base_quant == QuantFormat::FP8) {
    check(asked != QuantFormat::NF4, "run config: base_quantization: nf4, but " + cfg.base_model +
                                         " is an FP8 checkpoint (expected base_quantization: fp8 or none; its FP8 "
                                         "weights are used as they are)");
    s.log(LogLevel::Info, "base weights: the checkpoint's FP8 (128x128 block scales), as stored");
  } else if (asked != QuantFormat::None) {
    s.weights.base_quant = asked;
    s.log(LogLevel::Info, std::string("base weights: quantized to ") + quant_format_name(asked) +
                              " at load (attention, linear attention, MLP, shared-expert and expert matrices)");
  }
  const ModelConfig& mc = s.model_config();
  if (!cfg.lora_model_dir.empty()) {
    s.adapter = peft_adapter_read(cfg.lora_model_dir, mc);
    s.log(LogLevel::Info, "starting from the adapter in " + cfg.lora_model_dir);
  } else {
    try {
      s.adapter = lora_create(mc, lora_spec_from_run_config(cfg), static_cast<uint64_t>(cfg.seed));
    } catch (const Error& e) {  // the LoRA settings do not fit this checkpoint: say which checkpoint
      throw Error("base_model " + cfg.base_model + ": " + e.what());
    }
  }
  s.log(LogLevel::Info, describe_groups(s.adapter));
  try {
    s.data = data_prepare(cfg, [&](const std::string& m) { s.log(LogLevel::Info, m); });
  } catch (const std::exception& e) {
    s.note_resume_failure(e.what());
    throw;
  }
  check(!s.data.train.empty(), "datasets: no training examples left after filtering");
  // Everything is read and tokenized now: the dataset files may change or vanish during the run without
  // affecting it. The fingerprint goes into every checkpoint for the resume check.
  s.data_fp = data_fingerprint(s.data.train);
  s.samples = sample_prompts_load(cfg, mc.eos_token_id);  // every worker: sharded models generate on all

  // A run that starts from a PEFT adapter writes its adapters for that adapter's class (the keys PEFT expects
  // there), unless model_class names one.
  s.class_prefix = (cfg.model_class == "auto" || cfg.model_class.empty()) && !s.adapter.class_prefix.empty()
                       ? s.adapter.class_prefix
                       : peft_class_prefix(s.weights.key_prefix, cfg.model_class);
}

// The run's checkpointing: as configured, or with auto the memory plan for the free memory of this GPU.
static void plan_checkpointing(TrainSession& s) {
  const RunConfig& cfg = s.cfg;
  if (!cfg.gradient_checkpointing_auto) {
    s.checkpointing = cfg.gradient_checkpointing;
    s.checkpoint_layers = cfg.gradient_checkpointing_layers;
    return;
  }
  // Asked after the backend started: its CUDA context is already taken from the free memory.
  int64_t free = 0;
  if (s.be->device() != Device::CPU) {
    const int gpu = training_gpu(cfg, s.topts);
    for (const GpuDevice& d : gpu_environment(cfg.kernels).devices)
      if (d.index == gpu) free = d.free_bytes > 0 ? d.free_bytes : d.total_bytes;
  }
  if (s.be->device() == Device::CPU || free <= 0) {
    s.checkpointing = false;
    s.log(LogLevel::Info, "gradient_checkpointing: auto: no layers checkpointed (" +
                              std::string(s.be->device() == Device::CPU ? "CPU backend" : "free memory unknown") + ")");
    return;
  }
  MemoryPlanRequest req;
  req.lora_r = static_cast<int>(cfg.lora_r);
  req.tokens_per_step = cfg.micro_batch_size * cfg.sequence_len;
  req.fused_loss = cfg.fused_loss;
  req.loss_logits = s.loss_logits;
  req.base_quantization = quant_format_name(s.weights.base_quant);
  req.free_bytes = free;
  // Image rows: the tower's weights and activations for the data's most image tokens in one micro-batch.
  req.images.image_tokens_per_step = s.data.train_stats.max_image_tokens_per_step;
  req.lora_groups = cfg.lora_target_groups;
  // A GPU backend here (the CPU returned above); one without a stash ignores it.
  req.host_offload = cfg.activation_offload;
  const ModelInfo info = model_info_load(cfg.base_model);
  const MemoryPlan plan = plan_memory(info, req);
  s.checkpointing = plan.gradient_checkpointing;
  s.checkpoint_layers = plan.checkpoint_layers;
  s.keep = plan.keep;
  s.loss_chunk_rows = plan.loss_chunk_rows;
  s.log(plan.fits ? LogLevel::Info : LogLevel::Warning,
        "gradient_checkpointing: auto: " + memory_plan_text(info, plan) +
            (plan.fits ? "" : "; the run may run out of memory: lower micro_batch_size or sequence_len"));
}


namespace {

// Rows with images: the checkpoint's vision tower (frozen; run on the model's backend) goes into the model, and the
// image settings into the session (each micro-batch's pixels are read just before its step).
void attach_vision(TrainSession& s) {
  const auto has_images = [](const std::vector<Example>& exs) {
    return std::any_of(exs.begin(), exs.end(), [](const Example& e) { return !e.images.empty(); });
  };
  if (!has_images(s.data.train) && !has_images(s.data.eval)) return;
  s.vision = vision_data_config_read(s.cfg.base_model);
  check(s.vision && s.vision->unusable.empty(), s.cfg.base_model + ": the data has images but the checkpoint's "
                                                                  "vision settings cannot be read");
  s.model->set_vision(std::make_shared<VisionWeights>(vision_weights_load(*s.weights.reader, s.vision->vision)));
  s.log(LogLevel::Info, "vision: the image encoder runs on the training backend in its compute dtype (frozen; LoRA "
                        "on its blocks when the `vision` group is targeted)");
}

}  // namespace

// The train log's line for the run config's loss_logits.
static std::string loss_logits_note(const RunConfig& cfg, bool cpu) {
  const std::string head = "loss_logits: " + cfg.loss_logits;
  if (cfg.loss_logits != "bf16") return head + " (the fused loss's logits in fp32)";
  if (cpu) return head + ": the CPU backend computes the loss with fp32 logits (it is the fp32 reference)";
  if (!cfg.fused_loss)
    return head + ": applies to the fused loss; with fused_loss: false the [tokens, vocabulary] logits are in the "
                  "compute dtype";
  return head + ": the fused loss's logits in bf16 (the lm_head GEMM's output, as HF transformers and Liger), "
                "fp32 cross-entropy math";
}

// Several workers: whether the frozen weights are sharded and the experts split (weight_layout_select.h), for
// the smallest GPU of the job (its free memory with gradient_checkpointing: auto, which is then planned with the
// layout for one GPU's share of the work). Throws (every worker alike) when the plan says nothing fits.
static WeightLayoutChoice pick_weight_layout(TrainSession& s) {
  int64_t memory = 0;
  if (s.be->device() != Device::CPU) {
    const int gpu = training_gpu(s.cfg, s.topts);
    for (const GpuDevice& d : gpu_environment(s.cfg.kernels).devices)
      if (d.index == gpu)
        memory = s.cfg.gradient_checkpointing_auto && d.free_bytes > 0 ? d.free_bytes : d.total_bytes;
  }
  for (const std::string& m : s.dp->host().all_gather(std::to_string(memory)))
    memory = std::min<int64_t>(memory, std::stoll(m));
  const WeightLayoutChoice c = choose_weight_layout(s.cfg, model_info_load(s.cfg.base_model), s.world, memory,
                                                    ImageLoad{s.data.train_stats.max_image_tokens_per_step});
  s.log(LogLevel::Info, c.note);
  if (c.checkpoint_layers) {
    s.checkpointing = *c.checkpoint_layers > 0;
    s.checkpoint_layers = *c.checkpoint_layers;
    s.keep = c.keep;
  }
  return c;
}

void start_backend(TrainSession& s) {
  std::string backend_note;
  s.be = backend_create(s.cfg.backend, training_gpu(s.cfg, s.topts), &backend_note, s.cfg.kernels);
  s.log(LogLevel::Info, "backend: " + s.be->name() + (backend_note.empty() ? "" : " (" + backend_note + ")"));
  s.device = s.be->name();
  s.loss_logits = loss_logits_from_name(s.cfg.loss_logits, "loss_logits");
  s.log(LogLevel::Info, loss_logits_note(s.cfg, s.be->device() == Device::CPU));
  if (!s.weights.tied && !s.device.starts_with("cpu"))  // a CPU run has no GPU memory to keep free
    s.log(LogLevel::Info, "embedding table: untied from the lm_head, so it stays in host memory (the GPU reads its "
                          "rows over the bus and keeps " + std::to_string((s.weights.embed.numel() * 2) >> 20) +
                          " MiB free)");
  if (s.dp) {
    s.device = check_workers_agree(*s.dp, s.cfg, s.data_fp, *s.be,
                                   [&](LogLevel lv, const std::string& m) { s.log(lv, m); });
    s.dp->connect_backend(*s.be);
    s.log(LogLevel::Info, "data parallel: " + s.device);
  }
  ShardGatherer* shard = nullptr;
  TokenExchange* ep = nullptr;
  WeightLayoutChoice layout;
  if (s.dp) {
    layout = pick_weight_layout(s);
    if (layout.sharded) shard = &s.dp->shard_gatherer();
    if (layout.expert_parallel) ep = &s.dp->token_exchange();
  }
  if (!layout.checkpoint_layers) plan_checkpointing(s);
  s.model = std::make_unique<Qwen35Model>(s.weights, *s.be, shard, ep);
  attach_vision(s);
  // Expert parallel: the adapter stays on the host until each worker has its experts' slice of rank 0's adapter
  // (restore_or_create_run), so no GPU holds the whole expert LoRA.
  if (ep) return;
  lora_to_backend(s.adapter, *s.be);
  if (s.dp) s.dp->attach(s.adapter, int64_t(25) << 20);
}

void plan_steps(TrainSession& s) {
  // The checkpoint to resume from, and how many micro-batches its steps took (the global batch stays that of
  // the run whatever the number of GPUs now).
  int64_t& ckpt_global = s.ckpt_global;
  if (s.resumed) {
    s.ckpt = checkpoint_latest(s.cfg.output_dir);
    if (s.ckpt) {
      const TrainerState st = checkpoint_load(*s.ckpt).state;
      const auto g = st.extra.find("global_micro_batches");
      if (g != st.extra.end()) ckpt_global = std::stoll(g->second);
    }
  }
  if (s.resuming && s.dp) ckpt_global = std::stoll(s.dp->host().broadcast(std::to_string(ckpt_global)));
  s.global = global_micro_batches(s.cfg.gradient_accumulation_steps, s.world, ckpt_global);
  per_worker_accumulation(s.global, s.world);  // refuses a GPU count that cannot keep the global batch
  s.mine = shard_positions(s.global, s.dp ? s.dp->rank() : 0, s.world);

  BatchStream probe(s.data.train, s.cfg, {});
  const int64_t steps_per_epoch = std::max<int64_t>(1, (probe.per_epoch() + s.global - 1) / s.global);
  s.total_steps = s.cfg.max_steps > 0 ? s.cfg.max_steps
                                      : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                                                 s.cfg.num_epochs * steps_per_epoch)));
  s.warmup = s.cfg.warmup_steps > 0 ? s.cfg.warmup_steps
                                    : static_cast<int64_t>(std::ceil(s.cfg.warmup_ratio * s.total_steps));
}

namespace {

// The resumed run's checkpoint: weights, moments and position; refused when the training data changed.
void restore_checkpoint(TrainSession& s) {
  // Expert parallel: the adapter is still on the host (start_backend), sliced after the restore.
  TrainerState st = s.dp && s.dp->expert_parallel()
                        ? checkpoint_restore_host(*s.ckpt, s.adapter, s.model_config())
                        : checkpoint_restore(*s.ckpt, s.adapter, *s.be, s.model_config());
  const auto fp = st.extra.find("data_fingerprint");
  if (fp != st.extra.end() && fp->second != s.data_fp) {
    std::string files;
    for (const auto& d : s.cfg.datasets) files += (files.empty() ? "" : ", ") + d.path;
    const std::string why = "the training data (" + files + ") changed since " + *s.ckpt +
                            " was written; its data position would point into different examples. "
                            "Restore the dataset files, or start a new run";
    s.note_resume_failure(why);
    throw Error("--resume: " + why);
  }
  s.step = st.step;
  s.cursor = {st.epoch_index, st.micro_batch_index};
  s.tokens_seen = st.tokens_seen;
  s.wall_offset = st.wall_seconds;
  s.log(LogLevel::Info, "resuming run " + s.run_id + " from " + *s.ckpt + " at step " + std::to_string(s.step) +
                            (s.world > 1 || s.ckpt_global > 0
                                 ? " (" + std::to_string(s.global) + " micro-batches per step over " +
                                       std::to_string(s.world) + " GPU" + (s.world > 1 ? "s" : "") + ")"
                                 : ""));
}

void create_run_record(TrainSession& s) {
  const RunConfig& cfg = s.cfg;
  RunRecord r;
  r.name = cfg.run_name.empty() ? fs::path(cfg.output_dir).filename().string() : cfg.run_name;
  r.status = "running";
  r.created_at = now_iso();
  r.model = cfg.base_model;
  for (const auto& d : cfg.datasets) r.datasets += (r.datasets.empty() ? "" : ",") + d.path;
  r.config_yaml = run_config_to_yaml(cfg);
  r.output_dir = cfg.output_dir;
  r.engine_version = DT_VERSION;
  r.device = s.device;
  r.total_steps = s.total_steps;
  r.pid = static_cast<int64_t>(::getpid());
  r.tags = cfg.tags;
  s.run_id = s.store->create_run(r);
}

}  // namespace

void restore_or_create_run(TrainSession& s) {
  if (s.resumed) {
    s.run_id = s.resumed->id;
    if (s.ckpt)
      restore_checkpoint(s);
    else
      s.log(LogLevel::Warning,
            "resuming run " + s.run_id + ": no checkpoint in " + s.cfg.output_dir + ", starting over");
    // The run is ours since claim_run (status running, this pid); the summary follows the truncation.
    s.store->truncate_metrics(s.run_id, s.step);
    if (s.resumed->device != s.device) {
      s.resumed->device = s.device;
      auto r = s.store->find_run(s.run_id);
      if (r) {
        r->device = s.device;
        s.store->update_run(*r);
      }
    }
  } else if (s.store) {
    create_run_record(s);
  }
  if (s.dp) {
    // Every worker starts from rank 0's weights, moments and position.
    const std::string pos = s.dp->host().broadcast(
        std::to_string(s.step) + " " + std::to_string(s.cursor.epoch) + " " + std::to_string(s.cursor.index) +
        " " + std::to_string(s.tokens_seen) + " " + s.run_id);
    if (!s.root) {
      std::istringstream in(pos);
      in >> s.step >> s.cursor.epoch >> s.cursor.index >> s.tokens_seen >> s.run_id;
    }
    if (s.dp->expert_parallel()) {  // each worker uploads its own experts' slice of rank 0's expert LoRA only
      s.dp->scatter_expert_lora(s.adapter);
      lora_to_backend(s.adapter, *s.be);
    }
    s.dp->broadcast_adapter(s.adapter);
    if (s.dp->expert_parallel()) s.dp->attach(s.adapter, int64_t(25) << 20);
  }
}

}  // namespace deltatune
