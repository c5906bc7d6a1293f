"""HF transformers + PEFT (+ flash-linear-attention) training step with the model split over the visible GPUs by
layers (accelerate's dispatch_model: a device map, hidden states moved between the GPUs; one GPU works at a
time): the HF way to train a model that does not fit one GPU, the baseline of our sharded / expert-parallel
step. Same model, LoRA and row as hf_train_step.py; one row of --tokens random ids. Prints one JSON line:
tokens/s (all GPUs together) and each GPU's peak.

  python3 hf_pipeline_step.py --shape 35b-a3b --tokens 4096 [--fla 1] [--experts 1]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_train_step import import_fla, lora_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="35b-a3b")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--fla", type=int, default=1)
    ap.add_argument("--experts", type=int, default=1)
    a = ap.parse_args()
    if a.fla:
        import_fla()
    from accelerate import dispatch_model
    n = torch.cuda.device_count()
    # Random bf16 weights are drawn on GPU 0 (seconds; on the CPU minutes), then the upper layers move to the other
    # GPUs: GPU 0 holds the whole model once (a 141 GB H200 holds the 35B-A3B shape; an 80 GB H100 does not).
    model, cfg = lora_model(a.shape, 0, False, a.experts)
    L = cfg.num_hidden_layers
    dm = {"base_model.model.model.embed_tokens": 0, "base_model.model.model.rotary_emb": 0}
    for i in range(L):
        dm[f"base_model.model.model.layers.{i}"] = min(n - 1, i * n // L)
    dm["base_model.model.model.norm"] = n - 1
    dm["base_model.model.lm_head"] = n - 1
    model = dispatch_model(model, device_map=dm)
    torch.cuda.empty_cache()
    for d in range(n):
        torch.cuda.reset_peak_memory_stats(d)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), device="cuda:0")
    times, loss = [], None
    for s in range(a.warmup + a.steps):
        for d in range(n):
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for d in range(n):
            torch.cuda.synchronize(d)
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        loss = float(out.loss.detach())
    med = statistics.median(times)
    peaks = [round(torch.cuda.max_memory_allocated(d) / 2**30, 3) for d in range(n)]
    print(json.dumps(dict(bench="train_step", impl="hf_peft" + ("_fla" if a.fla else "") + "_pipeline", shape=a.shape,
                          gpus=n, tokens=a.tokens, step_ms=round(med * 1e3, 2), tokens_per_s=round(a.tokens / med, 1),
                          tokens_per_s_per_gpu=round(a.tokens / med / n, 1), peak_vram_gib_per_gpu=peaks,
                          loss=round(loss, 5), device=torch.cuda.get_device_name())), flush=True)


if __name__ == "__main__":
    main()
