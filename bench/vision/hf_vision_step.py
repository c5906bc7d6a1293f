#!/usr/bin/env python3
"""transformers + PEFT vision + text LoRA step on the same rows as bench_vision_step: random-weight bf16
Qwen3_5ForConditionalGeneration of the 9B shape (text: bench/train_step/hf_train_step.py's "9b"; vision: depth 27,
hidden 1152, 16 heads, intermediate 4304, out 4096), --rows rows of --tokens tokens with one --side x --side image
each (text, <vision_start>, image tokens, <vision_end>, text; labels -100 on the image and its start/end tokens),
LoRA r 16 (alpha 32) on the text model's linears (hf_train_step.TARGETS; the tower frozen), --vision-lora 1 adds
the tower blocks' attn.qkv, attn.proj, mlp.linear_fc1/2; gradient checkpointing, sdpa, AdamW. --fla 1 imports
flash-linear-attention (carried wheels) for the GDN layers. Prints one JSON line (tokens/s, images/s, peak VRAM).
"""
import argparse
import faulthandler
import json
import os
import signal
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_step"))
from hf_train_step import SHAPES, TARGETS, import_fla  # noqa: E402

IMAGE, START, END = 248056, 248053, 248054


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--side", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--vision-lora", type=int, default=0)
    ap.add_argument("--fla", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--depth", type=int, default=27)
    ap.add_argument("--device", default="cuda", help="cpu: a check of the script with small --layers/--depth/--side")
    a = ap.parse_args()
    dev = a.device
    faulthandler.register(signal.SIGUSR1)  # `timeout -s USR1` shows where a run that ran out of time was
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if a.fla:
        import_fla()
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text = dict(SHAPES["9b"])
    if a.layers:
        text["num_hidden_layers"] = a.layers
    text.update(vocab_size=248320, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True})
    vision = dict(depth=a.depth, hidden_size=1152, hidden_act="gelu_pytorch_tanh", intermediate_size=4304,
                  num_heads=16, in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                  out_hidden_size=4096, num_position_embeddings=2304)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=IMAGE, vision_start_token_id=START,
                        vision_end_token_id=END, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    cfg.text_config._attn_implementation = "sdpa"
    cfg.vision_config._attn_implementation = "sdpa"
    t_start = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = Qwen3_5ForConditionalGeneration(cfg)
    torch.set_default_dtype(torch.float32)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    targets = r".*language_model.*\.(" + "|".join(TARGETS) + r")"
    if a.vision_lora:
        targets = "(" + targets + r")|(.*visual\.blocks\.\d+\.(attn\.qkv|attn\.proj|mlp\.linear_fc1|mlp\.linear_fc2))"
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, lora_dropout=0.0))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # fp32 LoRA master weights, as ours
    print(f"model ready after {time.perf_counter() - t_start:.1f} s", file=sys.stderr, flush=True)

    g = a.side // 16
    image_tokens = g * g // 4
    before = (a.tokens - image_tokens - 2) // 8
    ids = torch.randint(0, 240000, (a.rows, a.tokens), device=dev)
    ids[:, before] = START
    ids[:, before + 1:before + 1 + image_tokens] = IMAGE
    ids[:, before + 1 + image_tokens] = END
    labels = ids.clone()
    labels[:, before:before + image_tokens + 2] = -100
    pixels = (torch.rand(a.rows * g * g, 3 * 2 * 16 * 16, device=dev) * 3.4 - 1.7).to(torch.bfloat16)
    grid = torch.tensor([[1, g, g]] * a.rows, device=dev)
    mm = (ids == IMAGE).long()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    times, loss = [], None
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=ids, pixel_values=pixels, image_grid_thw=grid, labels=labels, mm_token_type_ids=mm)
        if s == 0:
            sync()
            print(f"first forward {(time.perf_counter() - t0) * 1e3:.0f} ms", file=sys.stderr, flush=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        loss = float(out.loss.detach())
        print(f"step {s}: {(time.perf_counter() - t0) * 1e3:.1f} ms loss {loss:.4f}", file=sys.stderr, flush=True)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else 0.0
    gdn = "fla" if a.fla and any(k.startswith("fla.ops.gated_delta_rule") for k in sys.modules) else "torch"
    print(json.dumps(dict(bench="vision_step", impl="hf_peft" + ("_fla" if a.fla else ""), shape="9b",
                          layers=cfg.text_config.num_hidden_layers, depth=a.depth, rows=a.rows, tokens=a.tokens,
                          image_tokens=image_tokens, side=a.side, vision_lora=bool(a.vision_lora),
                          step_ms=round(med * 1e3, 2), tokens_per_s=round(a.tokens * a.rows / med, 1),
                          images_per_s=round(a.rows / med, 3), peak_vram_gib=round(peak, 3), loss=round(loss, 5),
                          gdn_path=gdn, device=torch.cuda.get_device_name() if dev == "cuda" else "cpu")), flush=True)


if __name__ == "__main__":
    main()
