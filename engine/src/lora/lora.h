// LoRA adapter state: one LoraModule per adapted linear (or 3-D expert parameter), fp32 on the backend.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"

namespace deltatune {

class Backend;

struct LoraModule {
  // Module path below the decoder, without class prefix: "layers.3.self_attn.q_proj",
  // "layers.0.mlp.shared_expert.up_proj"; for expert parameters "layers.0.mlp.experts.gate_up_proj"; the vision
  // tower's "visual.blocks.2.attn.qkv" (`layer` is then the block index).
  std::string path;
  std::string group;   // attn | linear_attn | mlp | shared_expert | experts | vision
  std::string suffix;  // q_proj, in_proj_qkv, ..., experts.gate_up_proj, experts.down_proj
  int layer = 0;
  int64_t in = 0, out = 0;
  int64_t experts = 0;  // > 0 for 3-D expert parameters
  int r = 0;
  float scaling = 0;    // alpha / r (or alpha / sqrt(r) with rsLoRA)
  // Linear: A [r, in], B [out, r]. Experts (PEFT ≥ 0.19.1 layout, peft-adapter.md §6.2):
  // A [r*E, in] with row e*r+k = row k of expert e; B [out, r*E] with column k*E+e = column k of expert e. On the
  // backend an expert module's B, gB, mB and vB are [E, out, r] instead (lora/lora_b_layout.h).
  Tensor A, B;          // F32 master weights on the backend device
  Tensor Ac, Bc;        // compute-dtype copies of A and B while a LoraComputeCopies scope holds them, else empty
  Tensor gA, gB;        // gradients (+=), F32
  Tensor mA, vA, mB, vB;  // AdamW moments (allocated by the optimizer)

  // AdamW moment i: 0 mA, 1 vA (A-shaped), 2 mB, 3 vB (B-shaped).
  Tensor& moment(int i) { return i == 0 ? mA : i == 1 ? vA : i == 2 ? mB : vB; }
  const Tensor& moment(int i) const { return const_cast<LoraModule*>(this)->moment(i); }
};

struct LoraAdapter {
  int r = 16;
  double alpha = 32;
  double dropout = 0;
  bool rslora = false;
  // Class prefix of the keys of the PEFT adapter this was read from ("model." for *ForCausalLM,
  // "model.language_model." for *ForConditionalGeneration); empty for an adapter created here. Training from
  // that adapter and exporting it keep its class unless one is asked for.
  std::string class_prefix;
  std::vector<LoraModule> modules;
  std::map<std::string, size_t> by_path;
  // lora_to_backend places every gA/gB of the linear (not expert) modules in this one F32 buffer, so that
  // lora_zero_grad zeroes them in one fill while they all still live there (dropped by the first lora_zero_grad
  // that finds one replaced, and by DataParallel::attach, which places them in its own buffer).
  Tensor grad_flat;

  LoraModule* find(const std::string& path);
  const LoraModule* find(const std::string& path) const;
  int64_t trainable_params() const;
  std::map<std::string, int64_t> params_per_group() const;
  void reindex();  // rebuilds by_path from modules
};

// All target groups the model has, e.g. {attn, linear_attn, mlp} or {attn, linear_attn, shared_expert, experts},
// plus `vision` for a checkpoint whose config.json has a vision_config.
std::vector<std::string> lora_groups_of(const ModelConfig& cfg);
// Module suffixes of a group (attn -> q_proj,k_proj,v_proj,o_proj; experts -> experts.gate_up_proj, ...).
std::vector<std::string> lora_group_suffixes(const std::string& group);

struct LoraSpec {
  int r = 16;
  double alpha = 32;
  double dropout = 0;
  bool rslora = false;
  std::vector<std::string> groups;      // target groups
  std::vector<std::string> modules;     // explicit module suffixes (PEFT target_modules)
  std::vector<std::string> parameters;  // explicit 3-D params (PEFT target_parameters)
};

// Default groups when a run names no targets (the rule: lora_group_is_default in deltatune/model_info.h): every
// group of the model except `experts` and `vision` (attn,
// linear_attn, mlp for dense; attn, linear_attn, shared_expert for MoE) — what "all linear layers" means for
// these models; expert LoRA multiplies the adapter size by E and the vision tower's LoRA is opt-in.
std::vector<std::string> lora_default_groups(const ModelConfig& cfg);
// Every adaptable module of the model (A/B undefined, r/scaling 0), in layer order then registration order.
std::vector<LoraModule> lora_inventory(const ModelConfig& cfg);
// PEFT list matching of one target (name == t or name ends with "." + t) against a module, with or without
// the class prefix ("model." / "model.language_model.").
bool lora_target_matches(const LoraModule& m, const std::string& target);

// Creates the modules the spec selects, on the host (F32), initialised as PEFT does by default:
// A ~ kaiming_uniform(a=√5) = U(-1/√in, 1/√in) from `seed`, B = 0. Throws Error if the spec selects nothing
// or names a module/group the model lacks.
LoraAdapter lora_create(const ModelConfig& cfg, const LoraSpec& spec, uint64_t seed);
// Position of a module in its layer's input-sharing group (attention q/k/v, the GDN in_proj qkv/z/b/a, MLP
// gate/up: 0, 1, ...), or -1 for a module that shares its input with no other (o_proj, out_proj, down_proj,
// experts, the vision tower).
int lora_input_share_rank(const LoraModule& m);
// Moves A/B (and the AdamW moments where defined) to the backend — expert B and its moments regrouped to
// [E, out, r] (lora/lora_b_layout.h) — and allocates zeroed gradients. The gA of the modules of one input-sharing
// group lie side by side in grad_flat in lora_input_share_rank order (one [Σr, in] matrix when r·in keeps the
// alignment), so that one product forms them all (model/lora_linear.h linear_group_bwd).
void lora_to_backend(LoraAdapter& adapter, Backend& backend);
void lora_zero_grad(LoraAdapter& adapter, Backend& backend);

}  // namespace deltatune
