// The whole run as one YAML file. Key names follow axolotl where the meaning is the same.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deltatune {

struct DatasetSpec {
  std::string path;
  std::string type;   // "", "chat" (messages), "sharegpt", "alpaca", "completion", "pretokenized"
  std::string split;  // "" = train; "validation" = used as eval set
  friend bool operator==(const DatasetSpec&, const DatasetSpec&) = default;
};

struct RunConfig {
  // model
  std::string base_model;               // HF checkpoint folder
  std::string model_class = "auto";     // "auto" | "causal_lm" | "conditional_generation" (adapter key prefix)
  // data
  std::vector<DatasetSpec> datasets;
  std::vector<DatasetSpec> test_datasets;
  double val_set_size = 0.0;            // fraction of train examples held out for eval
  int64_t sequence_len = 2048;
  bool sample_packing = false;
  bool train_on_inputs = false;
  // Passed to the chat template as HF's apply_chat_template(enable_thinking=...): "auto" passes nothing (the
  // template's default), "true" / "false" set it (Qwen3.5 templates then keep or drop the reasoning block).
  std::string enable_thinking = "auto";
  bool skip_bad_rows = false;
  std::string truncation = "truncate";  // "truncate" | "drop"
  std::string dataset_prepared_path;    // token cache folder ("" = <output_dir>/../.cache or XDG cache)
  // adapter
  std::string adapter = "lora";
  int lora_r = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.0;
  bool use_rslora = false;
  std::vector<std::string> lora_target_groups;      // attn, linear_attn, mlp, shared_expert, experts, vision
  std::vector<std::string> lora_target_modules;     // module suffixes (PEFT target_modules)
  std::vector<std::string> lora_target_parameters;  // 3-D params (PEFT target_parameters)
  std::string lora_model_dir;                        // start from this PEFT adapter
  // optimisation
  int64_t micro_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  double num_epochs = 1;
  int64_t max_steps = -1;               // > 0 overrides num_epochs
  double learning_rate = 2e-4;
  std::string lr_scheduler = "cosine";  // constant | linear | cosine
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  std::string optimizer = "adamw_torch";  // adamw_torch | adamw | sgd
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;           // <= 0 disables clipping
  int64_t seed = 42;
  // engine
  std::string backend = "auto";         // auto | cpu | cuda
  int gpu = 0;
  // Data parallel over this machine's GPUs: `gpus: [0, 1]` or `gpus: all` (one worker process per GPU);
  // empty = one GPU, `gpu`.
  std::vector<int> gpus;
  bool gpus_all = false;
  // CUDA kernels: "auto" (the device's best path: wgmma + TMA on a Hopper, the portable sm_80 kernels
  // elsewhere) | "portable" (the sm_80 kernels on any GPU; for comparisons and bug reports).
  std::string kernels = "auto";
  // Frozen base linear weights (attention, Gated DeltaNet projections, MLP, shared expert) held quantized:
  // "none" (the checkpoint's bf16) | "fp8" (e4m3 with 128x128 block scales, as official FP8 checkpoints) |
  // "nf4" (bitsandbytes' NF4, 64-value blocks, double-quantized absmax). axolotl's `load_in_4bit: true` reads as
  // nf4. An FP8 checkpoint (config.json quantization_config, quant_method fp8) is fp8 whatever this says.
  std::string base_quantization = "none";
  // Several GPUs: how the frozen base weights are held (deltatune/shard_plan.h). "auto": the memory plan picks
  // (replicated when it fits, else sharded; CPU workers: replicated) and a run that fits no layout is refused
  // before loading the model | "replicated" (every GPU holds all of them) | "sharded" (each GPU keeps 1/N of
  // every decoder layer and gathers a layer right before its forward and backward) | "expert_parallel" (MoE:
  // each GPU holds E/N experts and their LoRA, tokens travel to their experts' GPU) | "expert_parallel_sharded"
  // (the experts so, the rest sharded).
  std::string weight_layout = "auto";
  bool fused_loss = true;
  // The fused loss's logits (deltatune/loss_logits.h): "fp32" (the default) | "bf16" (the lm_head GEMM writes
  // bf16 logits, as HF transformers and Liger; fp32 cross-entropy math; the CUDA backend's loss chunks then hold
  // twice the rows in the same memory: faster). The CPU backend computes fp32 logits whatever this says.
  std::string loss_logits = "fp32";
  // `gradient_checkpointing: auto` (the default) | true | false | N (= true with N layers). auto: at the start
  // of a GPU run the memory plan (deltatune/memory_plan.h) picks the checkpointed layers, what they keep for
  // their recompute (deltatune/recompute_keep.h) and the loss chunk for the GPU's free memory; on the CPU nothing
  // is checkpointed.
  bool gradient_checkpointing_auto = true;
  bool gradient_checkpointing = false;  // without auto
  // With gradient_checkpointing: checkpoint only the first N decoder layers; the rest keep their activations
  // (no recompute: faster, more memory). -1 = all layers.
  int64_t gradient_checkpointing_layers = -1;
  // With `gradient_checkpointing: auto` on a GPU: whether the plan may hold checkpointed layers' inputs (and the
  // MLP gate/up of some of them) in page-locked host memory, so that more is kept for the recompute (the plan
  // reports the host bytes). false: never (hosts short of RAM, or pinned memory refused).
  bool activation_offload = true;
  std::string nan_policy = "stop";      // stop | skip
  // bookkeeping
  std::string output_dir = "runs/run";
  std::string run_name;
  int64_t logging_steps = 1;
  int64_t eval_steps = 0;               // 0 = at the end only (if an eval set exists)
  int64_t save_steps = 0;               // 0 = only at the end / on stop
  int64_t save_total_limit = 2;
  std::string resume_from_checkpoint;   // checkpoint folder, or "latest"
  std::vector<std::string> tags;
  // Generations at every eval step (eval_steps, and the last step), greedy, kept per run and step in the
  // experiment database. `sample_prompts:` is a list (each item a chat: a list of {role, content}, a
  // {messages: [...]} mapping, or a string = one user message) or the path of a JSONL file of such rows. In the
  // config: sample_prompts holds each chat as a JSON array of {role, content}; sample_prompts_file the path.
  std::vector<std::string> sample_prompts;
  std::string sample_prompts_file;
  int64_t sample_max_new_tokens = 64;
  friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

// Parse a run file; unknown keys and bad values throw deltatune::Error naming the key (and the closest
// valid key for typos). Relative paths are resolved against the file's folder: inputs (base_model, dataset
// paths, lora_model_dir, resume_from_checkpoint) when they exist there, else kept as written; outputs
// (output_dir, dataset_prepared_path) always. A `key:` with no value keeps the default.
RunConfig run_config_from_yaml_file(const std::string& path);
RunConfig run_config_from_yaml_string(const std::string& yaml, const std::string& base_dir = ".");
// Canonical YAML of a config (every key, stable order); parsing it gives the same config.
std::string run_config_to_yaml(const RunConfig& cfg);
// Every valid key of the run file, in canonical order.
const std::vector<std::string>& run_config_keys();

// Checks every value (ranges, choices) like the parser does, plus what a run needs before it can start
// (base_model, at least one dataset, output_dir). For configs built in code (the studio's editor).
void run_config_validate(const RunConfig& cfg);
// (key, value) for every key in canonical order; values are one-line YAML (lists in flow style). For
// showing and diffing configs.
std::vector<std::pair<std::string, std::string>> run_config_items(const RunConfig& cfg);
// Stable 16-hex-digit hash of the canonical YAML (checkpoints record it to detect a changed config).
std::string run_config_hash(const RunConfig& cfg);

}  // namespace deltatune
