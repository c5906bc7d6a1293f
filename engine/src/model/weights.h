// Frozen base weights of a Qwen3.5 checkpoint as stored on disk (host tensors, zero-copy from mmap where
// the dtype allows), with HF key names resolved (spec §2).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/quantized.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace deltatune {

class CheckpointReader;

struct AttnWeights {          // full-attention layer, prefix ...self_attn.
  Tensor q_proj;              // [nH*hd*2, H] (per head: hd query rows then hd gate rows)
  Tensor k_proj, v_proj;      // [nKV*hd, H]
  Tensor o_proj;              // [H, nH*hd]
  Tensor q_norm, k_norm;      // [hd] zero-centred
};

struct LinearAttnWeights {    // Gated DeltaNet layer, prefix ...linear_attn.
  Tensor in_proj_qkv;         // [conv_dim, H]
  Tensor in_proj_z;           // [value_dim, H]
  Tensor in_proj_b, in_proj_a;  // [HV, H]
  Tensor conv1d;              // [conv_dim, K] (the checkpoint's [C,1,K] viewed 2-D)
  Tensor dt_bias, A_log;      // [HV]
  Tensor norm;                // [dv] plain multiplier
  Tensor out_proj;            // [H, value_dim]
};

struct MlpWeights {           // dense SwiGLU MLP or the MoE shared expert
  Tensor gate_proj, up_proj;  // [I, H]
  Tensor down_proj;           // [H, I]
};

struct MoeWeights {
  Tensor router;              // [E, H]  (mlp.gate.weight)
  Tensor gate_up;             // [E, 2*Ie, H] (fused; per-expert checkpoints are stacked at load)
  Tensor down;                // [E, H, Ie]
  MlpWeights shared;          // shared_expert.*
  Tensor shared_gate;         // [1, H]
};

struct LayerWeights {
  LayerKind kind = LayerKind::LinearAttention;
  Tensor input_norm, post_norm;  // [H] zero-centred
  AttnWeights attn;              // when kind == FullAttention
  LinearAttnWeights lin;         // when kind == LinearAttention
  MlpWeights mlp;                // dense models
  MoeWeights moe;                // MoE models
};

struct ModelWeights {
  ModelConfig config;
  std::string dir;
  // "model.language_model." (checkpoint stores the VL layout) or "model." (text-only layout).
  std::string key_prefix;
  bool tied = false;          // no lm_head.weight in the checkpoint
  Tensor embed;               // [V, H]
  Tensor final_norm;          // [H]
  Tensor lm_head;             // [V, H]; == embed when tied
  std::vector<LayerWeights> layers;
  bool experts_per_expert_layout = false;  // checkpoint had experts.{e}.gate_proj.weight etc.
  // Held quantized on the device: the dense linear matrices (attention, Gated DeltaNet projections, MLP, shared
  // expert). FP8 for an FP8 checkpoint, whose matrices are then the stored e4m3 bytes (U8) with their block
  // scales in fp8_scale_inv; otherwise the run's base_quantization (set it before building the model), applied
  // at upload, matrix by matrix.
  QuantFormat base_quant = QuantFormat::None;
  // FP8 checkpoints: weight_scale_inv of each dense linear matrix, by module name ("layers.3.self_attn.q_proj").
  std::map<std::string, Tensor> fp8_scale_inv;
  std::shared_ptr<CheckpointReader> reader;  // keeps the mmaps alive
  int64_t skipped_tensors = 0;             // model.visual.* / visual.* and mtp.* tensors left out
  std::vector<std::string> warnings;       // e.g. config tie flag disagreeing with the checkpoint
};

// One text tensor a checkpoint must hold, with its shape and parameter group ("embed", "norm", "attn",
// "linear_attn", "mlp", "router", "experts", "shared_expert"). lm_head.weight is not listed (optional).
struct ExpectedTensor {
  std::string key;  // full checkpoint key, prefix included
  Shape shape;
  std::string group;
};
// Every text tensor of `config` under `key_prefix`, in layer order. `per_expert_layout` lists
// mlp.experts.{e}.{gate,up,down}_proj.weight instead of the fused 3-D experts.gate_up_proj/down_proj.
std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& config, const std::string& key_prefix,
                                                   bool per_expert_layout);

// "model.language_model." or "model." (or a base model's "language_model." / "") depending on where
// embed_tokens.weight is; throws Error naming the folder when none.
std::string model_key_prefix(const CheckpointReader& reader);
// True when experts are stored per expert (mlp.experts.0.gate_proj.weight) rather than fused.
bool model_experts_per_expert(const CheckpointReader& reader, const std::string& key_prefix);
// model.visual.* (or visual.*) and mtp.*: stored in VL / official checkpoints, never used by the text model.
bool model_key_skipped(const std::string& key);

// Loads and validates every text tensor of the checkpoint folder `dir` (config.json + safetensors, single
// file or sharded). Skips model.visual.*, visual.* and mtp.*. Throws deltatune::Error naming the file and key.
ModelWeights model_weights_load(const std::string& dir);

}  // namespace deltatune
