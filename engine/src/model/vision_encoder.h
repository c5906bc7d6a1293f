// The vision tower (vision/vision_tower.h's math) on a Backend: weights uploaded once, activations in the
// backend's compute dtype (BF16 on CUDA: bf16 GEMM operands with fp32 accumulation; fp32 LayerNorm / GELU /
// softmax math), full attention within each image frame (SeqLayout::causal false). With the adapter's `vision`
// modules (visual.blocks.N.attn.qkv / attn.proj / mlp.linear_fc1 / mlp.linear_fc2) the forward adds their LoRA
// products and the backward takes their gradients; the tower's own weights stay frozen.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "lora/lora.h"
#include "model/lora_linear.h"
#include "vision/vision_tower.h"

namespace deltatune {

class VisionEncoder {
 public:
  // What the backward needs from the forward.
  struct BlockSaved {
    Tensor x_in, mean1, rstd1, a1, q, k, v, o, lse, x_mid, mean2, rstd2, a2, h, g;
    LinearCache qkv, proj, fc1, fc2;
  };
  struct Saved {
    std::vector<BlockSaved> blocks;
    Tensor x_final, mean_f, rstd_f, m1;
    SeqLayout frames;
    Tensor positions;
    int64_t patches = 0;
  };

  // Uploads `host`'s tensors to `be`: GEMM weights in `dtype` (the activations' dtype; be's compute dtype when
  // unset), norms and biases F32.
  VisionEncoder(Backend& be, std::shared_ptr<const VisionWeights> host, std::optional<DType> dtype = std::nullopt);
  const VisionConfig& config() const { return host_->cfg; }

  // The merger's output [patches / merge², out_hidden] (compute dtype) for `pixel_values` (patches,
  // patch_features) of images with (t, h, w) `grids`, back to back. `lora`: its vision modules are applied
  // (null or none: the frozen tower). `saved`: keeps what backward() needs. Throws when the sizes disagree.
  Tensor forward(const std::vector<float>& pixel_values, const std::vector<std::array<int64_t, 3>>& grids,
                 LoraAdapter* lora, const LoraRuntime& rt, Saved* saved);
  // d_embeds [patches / merge², out_hidden]: the loss gradient w.r.t. forward()'s output. Adds the vision
  // modules' LoRA gradients (+=) into their gA / gB.
  void backward(const Tensor& d_embeds, LoraAdapter& lora, const LoraRuntime& rt, Saved& saved);

  // Whether `lora` has modules of the tower.
  static bool adapts(const LoraAdapter* lora);

 private:
  struct Linear {
    Tensor w, b;  // (out, in), F32 (1, out)
  };
  struct Norm {
    Tensor w, b;
  };
  struct Block {
    Norm norm1, norm2;
    Linear qkv, proj, fc1, fc2;
  };
  struct BlockLora {
    LoraModule *qkv = nullptr, *proj = nullptr, *fc1 = nullptr, *fc2 = nullptr;
  };
  Linear upload(const VisionLinear& l);
  Norm upload(const VisionLayerNorm& n);
  BlockLora block_lora(LoraAdapter* lora, size_t block) const;
  // y (=) x·Wᵀ + b (+ LoRA).
  void linear(const Linear& l, LoraModule* m, const LoraRuntime& rt, uint64_t salt, const Tensor& x, Tensor& y,
              LinearCache& cache);

  Backend& be_;
  std::shared_ptr<const VisionWeights> host_;
  DType dt_;
  Linear patch_embed_;
  std::vector<Block> blocks_;
  Norm merger_norm_;
  Linear merger_fc1_, merger_fc2_;
};

}  // namespace deltatune
