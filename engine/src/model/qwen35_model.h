// The Qwen3.5 decoder (dense and MoE) on a Backend: forward, loss and backward through every frozen
// module into the LoRA weights. Backend-agnostic: it only calls Backend ops (spec §3).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "data/batch.h"
#include "deltatune/loss_logits.h"
#include "deltatune/recompute_keep.h"
#include "lora/lora.h"
#include "model/lora_linear.h"
#include "model/weights.h"

namespace deltatune {

struct VisionWeights;
class VisionEncoder;
class ActivationStash;

struct StepOptions {
  bool backward = false;           // also compute LoRA gradients (+=)
  float grad_scale = 1.f;          // dLoss/dCE_sum, i.e. 1 / (targets of the whole optimizer step)
  bool fused_loss = true;          // chunked lm_head + CE, never the full [T, V] logits
  int64_t loss_chunk_rows = 1024;
  // The fused loss's logits precision (the run config's loss_logits; deltatune/loss_logits.h).
  LossLogits loss_logits = LossLogits::F32;
  bool gradient_checkpointing = false;
  // With gradient_checkpointing: how many decoder layers, from the first, are checkpointed (-1 = all). The
  // others keep their activations: no recompute for them, more memory.
  int64_t checkpoint_layers = -1;
  bool checkpointed(int64_t layer) const {
    return gradient_checkpointing && (checkpoint_layers < 0 || layer < checkpoint_layers);
  }
  // What checkpointed layers keep from their first forward so that their recompute skips it (selective recompute).
  RecomputeKeep keep;
  LoraRuntime lora;                // dropout settings (training only)
  // Called (on the caller's thread) once the backward of a decoder layer has enqueued all of that layer's
  // LoRA gradient work, layers in backward order (last to first): data parallelism starts summing them there.
  std::function<void(int layer)> on_layer_backward;
  // Run the step as a recorded graph (CUDA graphs) when the backend can record and the step allows it (same
  // results bit for bit; see Qwen35Model::step). false: always op by op.
  bool record = true;
};

struct StepOutput {
  double loss_sum = 0;   // Σ CE over the batch's targets
  int64_t targets = 0;
  // MoE models: F32 [layers, E] device tensor, tokens routed to each expert in each layer by this step's
  // forward (accumulated on the device, never synchronised per layer). Undefined for dense models.
  Tensor moe_load;
  bool replayed = false;  // the step ran as a replayed recording (StepOptions::record)
};

// What generation keeps per sequence between forwards (spec §3.9), on the model's backend: for every linear
// attention layer the conv history [N, K-1, conv_dim] (compute dtype) and the delta-rule state
// [N, HV, dk, dv] (F32); for every full attention layer the KV cache [N, capacity, nKV, hd] (compute dtype).
class ShardedLayers;
struct DeviceLayerWeights;

struct InferenceCache {
  int64_t batch = 0, capacity = 0;
  struct Layer {
    Tensor conv, recurrent, k, v;
  };
  std::vector<Layer> layers;
};

// Whether the fused loss runs on the target rows alone (gathered, dh scattered back): at least an eighth of the
// rows have no target (prompt tokens under train_on_inputs: false), and some have one. From the counts alone (no
// scan). Such steps are not recorded (the recording's loss reads every row).
bool loss_on_target_rows(const Batch& batch);
// Those rows (empty when !loss_on_target_rows: the loss runs on every row).
std::vector<int32_t> loss_target_rows(const Batch& batch);

class Qwen35Model {
 public:
  // Uploads the frozen weights to the backend (matrices in the backend's weight dtype, small vectors F32).
  // With `shard` (one rank of a job, ZeRO-3 style): this rank keeps 1/world of each decoder layer's frozen
  // weights, and every use of a layer all-gathers it (the next one prefetched) and frees it after, so every
  // forward and backward (step, logits, forward_cached) is a collective: all ranks must call them in step.
  // With `ep` (expert parallel, model/expert_parallel.h): this rank uploads only its experts [r·E/N, (r+1)·E/N)
  // of every MoE layer, the adapter's expert LoRA must hold the same slice (dist/expert_lora.h), and every MoE
  // layer's forward and backward exchange token rows with the other ranks (a collective, as with `shard`).
  Qwen35Model(const ModelWeights& weights, Backend& backend, ShardGatherer* shard = nullptr,
              TokenExchange* ep = nullptr);
  ~Qwen35Model();
  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return be_; }

  // Forward (and backward when opts.backward) of one packed micro-batch. With opts.record, a step whose
  // sequence layout and settings repeat the previous step's is recorded once (the backend's step capture) and
  // replayed while they stay the same (qwen35_step_record.cpp); otherwise, and where recording is not possible
  // (sharded layers, expert parallel, a per-layer callback, LoRA dropout, images), op by op.
  StepOutput step(const Batch& batch, LoraAdapter* lora, const StepOptions& opts);
  // Full logits [T, V] (F32 host tensor) of a batch; for tests and evaluation tools.
  Tensor logits(const Batch& batch, LoraAdapter* lora);

  // Generation. A zeroed cache for `batch` sequences of up to `capacity` tokens each.
  InferenceCache new_inference_cache(int64_t batch, int64_t capacity);
  // Forward of new tokens (ids I32 [T] on the device) of every sequence of the cache: the layout's sequence n
  // continues cache row n, seq.positions are absolute positions (tokens already cached + offset); the cache is
  // updated. `prefill_from_empty`: every sequence starts at position 0 (the full attention then runs on the new
  // tokens alone). Returns the final hidden state (after the last norm) of the rows `rows` (I32 [N] on the
  // device; null = every token), [N, H] in the compute dtype; lm_logits turns them into logits.
  Tensor forward_cached(const Tensor& ids, const SeqLayout& seq, InferenceCache& cache, LoraAdapter* lora,
                        bool prefill_from_empty, const Tensor* rows);
  // logits (=) h·lm_headᵀ: h [N, H], logits [N, V] (any float dtype the backend's gemm writes).
  void lm_logits(const Tensor& h, Tensor& logits);
  // Whether a decode step (forward_cached) may be recorded and replayed (a graph reads the mapped host table
  // like device memory: tests/cuda/generate_cuda.cpp decodes the untied dense_bf16 golden recorded).
  bool decode_step_recordable() const { return !sharded_ && !ep_; }
  // Vision-language checkpoints: the image encoder (uploaded to this model's backend, run in its compute dtype;
  // frozen, LoRA on its blocks when the adapter has `vision` modules) whose merged tokens replace the embedding
  // rows of a batch's image tokens. Batches with images need it.
  void set_vision(std::shared_ptr<const VisionWeights> vision);
  // The sharded decoder layers (null when every layer is resident).
  const ShardedLayers* sharded_layers() const { return sharded_.get(); }
  // The expert-parallel exchange (null when every expert is here).
  TokenExchange* expert_parallel() const { return ep_; }
  // Every forward is a collective over the ranks (sharded layers or expert parallel).
  bool lockstep() const { return sharded_ != nullptr || ep_ != nullptr; }
  // Page-locked host bytes held for RecomputeKeep::inputs_on_host (0 when no step has used it).
  int64_t host_stash_bytes() const;

  struct DeviceLayer;
 private:
  struct Activations;
  struct StepRecord;  // qwen35_step_record.cpp
  SeqLayout make_layout(const Batch& batch);
  void check_ids(const Batch& batch) const;
  // The step's device work on uploaded inputs (ids, targets I32 [T]). A recorded step passes `dev`: the loss
  // sum goes to dev->loss (8 bytes on the device) and the gradient scale is read from dev->grad_scale (F32 [1],
  // written before each replay) instead of opts.grad_scale; op by op (null) the loss goes to out.loss_sum.
  struct DeviceScalars {
    Tensor& loss;
    const Tensor& grad_scale;
  };
  void step_ops(const Batch& batch, const SeqLayout& seq, const Tensor& ids, const Tensor& targets, LoraAdapter* lora,
                const StepOptions& opts, StepOutput& out, const DeviceScalars* dev);
  // The recorded path of step(): false when this step runs op by op.
  bool step_recorded(const Batch& batch, LoraAdapter* lora, const StepOptions& opts, StepOutput& out);
  // moe_load: F32 [layers, E] (+=) router statistics, or null. ids: the batch's ids on the device.
  Tensor hidden_states(const Batch& batch, const Tensor& ids, const SeqLayout& seq, LoraAdapter* lora,
                       const StepOptions& opts, Activations* acts, Tensor* moe_load = nullptr);
  // x [T, H] (=) the embedding rows of `ids` (device I32 [T]).
  void embed_tokens(const Tensor& ids, Tensor& x);
  // Layer i's frozen weights for use now: resident, or gathered (sharded) with layer `next` starting to gather.
  // layer_done(i) once the work that reads them is enqueued: frees a gathered copy.
  const DeviceLayerWeights& layer_weights(size_t i, std::optional<size_t> next);
  void layer_done(size_t i);
  // The stash of RecomputeKeep::inputs_on_host for a step with a backward (made on first use), or null: the
  // option off or the backend without one.
  ActivationStash* input_stash(const StepOptions& opts);
  // Whether layer i's input goes to the stash: a checkpointed layer but the last one (its recompute comes right
  // after the loss).
  bool input_stashed(const StepOptions& opts, int64_t i) const;
  // Whether layer i's MLP gate/up go to the stash too (RecomputeKeep::mlp_stashed), in slots gate_slot(i) and +1.
  bool gate_up_stashed(const StepOptions& opts, int64_t i) const;
  int gate_slot(int64_t i) const;
  // The forward's waits for gate/up copies after layer i's forward (all: every one, before the loss).
  void settle_gate_up(const StepOptions& opts, int64_t i, bool all);
  size_t layer_count() const;
  LayerKind layer_kind(size_t i) const;

  ModelConfig cfg_;
  Backend& be_;
  Tensor embed_, final_norm_, lm_head_;  // embed_: in mapped host memory when untied (see the constructor)
  std::vector<std::unique_ptr<DeviceLayer>> layers_;  // empty when sharded_
  std::unique_ptr<ShardedLayers> sharded_;
  TokenExchange* ep_ = nullptr;
  std::unique_ptr<VisionEncoder> vision_;
  std::unique_ptr<ActivationStash> stash_;  // before record_: a recording's copies use its host memory
  std::unique_ptr<StepRecord> record_;  // the recorded step and the previous step's key
};

}  // namespace deltatune
