#!/usr/bin/env python3
"""LoRA goldens with images: transformers + PEFT (fp32, CPU) on the tiny vision-language checkpoint of
make_model_goldens.py (run that first), fed the golden image sequence of model_golden.safetensors.

Two PEFT adapters (r 4, alpha 8, random A and B), each with the loss of Qwen3_5ForConditionalGeneration(
input_ids, pixel_values, image_grid_thw, labels) and every LoRA gradient of it:
  lora/         the text model's linears (every LM target group: attention, Gated DeltaNet, MLP; tower frozen)
  lora_vision/  the same plus the `vision` group: the tower blocks' attn.qkv, attn.proj, mlp.linear_fc1,
                mlp.linear_fc2 (not the merger)
Needs torch, transformers (5.x), peft, Pillow. Writes next to this file, in each folder:
  adapter/            the PEFT adapter (save_pretrained)
  grads.safetensors   d loss / d each LoRA matrix (PEFT's key names, ".default" dropped)
  golden.json         loss, number of gradients, library versions
"""
import json
import os

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import Qwen3_5ForConditionalGeneration

from golden_image_sequence import golden_image_inputs

HERE = os.path.dirname(os.path.abspath(__file__))
LM_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b",
              "out_proj", "gate_proj", "up_proj", "down_proj"]
VISION_TARGETS = ["attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"]


def make(out_name, target_modules, seed):
    OUT = os.path.join(HERE, out_name)
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration.from_pretrained("model", dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, target_modules=target_modules)
    pm = get_peft_model(model, cfg)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.mul_(0.5)
    os.makedirs(OUT, exist_ok=True)
    pm.save_pretrained(os.path.join(OUT, "adapter"))

    res = pm(**golden_image_inputs())
    res.loss.backward()
    grads = {n.replace(".default", ""): p.grad.detach().clone().contiguous()
             for n, p in pm.named_parameters() if p.requires_grad}
    save_file(grads, os.path.join(OUT, "grads.safetensors"), metadata={"format": "pt"})
    meta = {"loss": float(res.loss), "num_grads": len(grads), "transformers": transformers.__version__,
            "peft": peft.__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(meta)


def main():
    os.chdir(HERE)  # the adapter's base_model_name_or_path is then "model", never a machine's path
    lm = r".*language_model.*\.(" + "|".join(LM_TARGETS) + ")"
    vision = r".*visual\.blocks\.\d+\.(" + "|".join(t.replace(".", "\\.") for t in VISION_TARGETS) + ")"
    make("lora", lm, 3535)
    make("lora_vision", "(" + lm + ")|(" + vision + ")", 3536)


if __name__ == "__main__":
    main()
