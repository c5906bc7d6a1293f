"""Tiny random Qwen3.5 checkpoints for the PEFT adapter goldens (deterministic for a fixed torch version).

Writes, under OUT:
  dense_vl/   Qwen3_5ForConditionalGeneration, BF16, single file, with a vision tower (model.visual.*)
  dense_f32/  Qwen3_5ForCausalLM, F32 (text layout, model.*)
  moe_text/   Qwen3_5MoeForCausalLM, BF16, sharded; transformers saves experts per expert
              (mlp.experts.{e}.gate_proj.weight, ...)
  moe_noshared/ Qwen3_5MoeForCausalLM, F32, shared_expert_intermediate_size 0 (zero-sized shared expert)
Sizes differ on purpose (q_proj out != H, dv != dk, Ie != Is) so transposition bugs change shapes.
Run: python tests/goldens/peft/make_models.py OUT
"""
import sys

import torch
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM,
                          Qwen3_5MoeTextConfig, Qwen3_5TextConfig)

COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=8, layer_types=["linear_attention", "full_attention", "linear_attention",
                                                    "full_attention"])


def randomize(model):
    # HF's init leaves zero/one tensors (norms, biases); random everywhere makes every merge visible.
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_((torch.randn(p.shape, generator=g) * 0.05).to(p.dtype))


def main(out):
    torch.manual_seed(0)
    text = Qwen3_5TextConfig(intermediate_size=96, **COMMON)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2)
    vl = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text.to_dict(), vision_config=vision))
    randomize(vl)
    vl.to(torch.bfloat16).save_pretrained(f"{out}/dense_vl")

    clm = Qwen3_5ForCausalLM(Qwen3_5TextConfig(intermediate_size=80, **COMMON))
    randomize(clm)
    clm.to(torch.float32).save_pretrained(f"{out}/dense_f32")

    moe = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
                                                     shared_expert_intermediate_size=40, **COMMON))
    randomize(moe)
    moe.to(torch.bfloat16).save_pretrained(f"{out}/moe_text", max_shard_size="60KB")

    # shared_expert_intermediate_size 0: transformers keeps zero-sized shared-expert linears (PEFT adapts them).
    noshared = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(num_experts=4, num_experts_per_tok=2,
                                                          moe_intermediate_size=16,
                                                          shared_expert_intermediate_size=0, **COMMON))
    randomize(noshared)
    noshared.to(torch.float32).save_pretrained(f"{out}/moe_noshared")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT")
    main(sys.argv[1])
