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
  // With inputs_on_host, dense models: every k-th checkpointed layer past the first mlp_layers (layers m+k-1, m+2k-1,
  // ..., m = mlp_layers >= 0; never the last layer) keeps its MLP gate/up outputs too, in page-locked host memory:
  // copied out after its forward, back a layer ahead of its recompute. 0: none. The plan picks k from the copy
  // bandwidth against the forward's time (memory_plan.cpp).
  int64_t mlp_host_every = 0;

  bool mlp(int64_t layer) const { return mlp_layers < 0 || layer < mlp_layers; }
  bool mlp_on_host(int64_t layer) const {
    const int64_t k = mlp_host_every;
    return k > 0 && mlp_layers >= 0 && layer >= mlp_layers && (layer - mlp_layers) % k == k - 1;
  }
  // Whether checkpointed layer `layer` of `num_layers` sends its MLP gate/up to host memory (mlp_on_host, with the
  // inputs on the host; never the last layer, whose recompute follows its forward at once).
  bool mlp_stashed(int64_t layer, int64_t num_layers) const {
    return inputs_on_host && layer + 1 < num_layers && mlp_on_host(layer);
  }
  bool any() const { return attn_core || gdn_core || mlp_layers != 0 || mlp_host_every > 0; }
  bool operator==(const RecomputeKeep&) const = default;
};

}  // namespace deltatune
