#!/usr/bin/env python3
"""transformers' Qwen3_5VisionModel of the 9B shape (depth 27, hidden 1152, 16 heads, intermediate 4304, out 4096)
on one 1024x1024 image (grid 1x64x64), bf16 on the GPU, random weights: frozen forward, and forward + backward
with PEFT LoRA r 16 on every block's attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2 (what
bench_vision_tower runs). Prints a table row and one JSON line per mode.
Usage: hf_vision_tower.py [--images N] [--side 1024] [--steps 5] [--warmup 2] [--attn sdpa]
"""
import argparse
import json
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5VisionConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1)
    ap.add_argument("--side", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--depth", type=int, default=27)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args()
    cfg = Qwen3_5VisionConfig(depth=a.depth, hidden_size=1152, num_heads=16, intermediate_size=4304,
                              out_hidden_size=4096, num_position_embeddings=2304, patch_size=16,
                              spatial_merge_size=2, temporal_patch_size=2)
    cfg._attn_implementation = a.attn
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialise on the GPU: 430M parameters
        model = Qwen3_5VisionModel._from_config(cfg, dtype=torch.bfloat16).eval()
    g = a.side // 16
    grid = torch.tensor([[1, g, g]] * a.images, device="cuda")
    n = a.images * g * g
    pixels = torch.randn(n, 3 * 2 * 16 * 16, device="cuda", dtype=torch.bfloat16)
    print(f"{'mode':22s} {'images':>8s} {'patches':>8s} {'ms/step':>10s} {'images/s':>10s} {'peak GiB':>10s}")

    def run(train, m):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ms = 0.0
        for s in range(a.warmup + a.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if train:
                out = m(pixels, grid_thw=grid).pooler_output
                out.backward(torch.randn_like(out))
            else:
                with torch.no_grad():
                    m(pixels, grid_thw=grid)
            torch.cuda.synchronize()
            if s >= a.warmup:
                ms += (time.perf_counter() - t0) * 1000
        ms /= a.steps
        peak = torch.cuda.max_memory_allocated() / 2**30
        mode = "fwd+bwd (vision LoRA)" if train else "fwd (frozen)"
        print(f"{mode:22s} {a.images:8d} {n:8d} {ms:10.1f} {a.images * 1000 / ms:10.2f} {peak:10.2f}")
        print(json.dumps({"bench": "vision_tower", "impl": "hf+peft", "attn": a.attn, "mode": "train" if train else "frozen",
                          "images": a.images, "side": a.side, "depth": a.depth, "patches": n, "ms": round(ms, 3),
                          "images_per_s": round(a.images * 1000 / ms, 3), "peak_gib": round(peak, 3),
                          "torch": torch.__version__}))

    run(False, model)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                      target_modules=r".*blocks\.\d+\.(attn\.qkv|attn\.proj|mlp\.linear_fc1|mlp\.linear_fc2)")
    pm = get_peft_model(model, lora)
    pm.train()
    run(True, pm)


if __name__ == "__main__":
    main()
