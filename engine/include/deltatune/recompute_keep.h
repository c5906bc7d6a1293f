// Selective recompute: what a checkpointed decoder layer keeps from its first forward so that the recompute
// before its backward skips that work. Gradient checkpointing otherwise keeps only the layer's input; the parts
// here are the ones that cost the most recompute time per byte kept (PERF_NOTES session 29).
#pragma once
#include <cstdint>

namespace deltatune {

struct RecomputeKeep {
  // Full-attention layers: the attention core's output and logsumexp (bf16 [T, nH, hd] + fp32 [T, nH]); the
  // recompute skips the attention forward.
  bool attn_core = false;
  // Gated DeltaNet layers: the delta rule's output and everything its backward reads (Backend::GdnKeep::All); the
  // recompute skips the delta-rule forward.
  bool gdn_core = false;
  // The first N checkpointed layers (-1: every one) keep the dense MLP's gate and up outputs (bf16 [T, I] each); the
  // recompute skips both base GEMMs (their LoRA's rank-r intermediates are recomputed). MoE layers keep nothing here.
  int64_t mlp_layers = 0;
  // The checkpointed layers' inputs (bf16 [T, H] each; all but the last layer's) wait in page-locked host memory
  // between the forward and their layer's recompute, copied out and back beside the compute (backend/
  // activation_stash.h), so the device holds two of them at most instead of one a layer. A backend without a
  // stash (CPU) keeps them on the device.
  bool inputs_on_host = false;

  bool mlp(int64_t layer) const { return mlp_layers < 0 || layer < mlp_layers; }
  bool any() const { return attn_core || gdn_core || mlp_layers != 0; }
  bool operator==(const RecomputeKeep&) const = default;
};

}  // namespace deltatune
