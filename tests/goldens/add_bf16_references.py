#!/usr/bin/env python3
"""Adds two bf16 reference losses to each tests/goldens/models/*/golden_eval.json (the checkpoints and every
existing value stay as they are). Run from the repo root with torch and transformers (5.23+):
  python3 tests/goldens/add_bf16_references.py [NAME...]

- `loss_bf16_matrices`: HF's fp32 forward of the checkpoint with its weight matrices rounded to bf16, the way a
  bf16 engine holds them (DeltaTune's CUDA backend uploads every linear, embedding, head, router and expert matrix
  in bf16 and keeps norms, conv1d taps, A_log and dt_bias in fp32: engine/src/model/qwen35_model.cpp). For an F32
  checkpoint this is the model a bf16 engine runs; the distance of the engine's bf16 loss from it is its
  arithmetic's error alone. For a BF16 checkpoint (dense_bf16) it equals `loss`.
- `loss_hf_bf16`: HF's own bf16 forward (model loaded in bfloat16, eager), for comparison.
Both with `per_sequence` style sums like `loss` (sum of CE over non-ignored shifted targets / their count, each
sequence run alone). Also `router_flips_hf_bf16`: token-layers whose top-k expert set differs between HF's bf16
and fp32 forwards (MoE only), and `router_flips_bf16_matrices` for the rounded-matrix forward.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
NAMES = ["dense_vl", "moe_tied", "dense_bf16", "moe_per_expert", "moe_vl_quirks"]
KEPT_F32 = ("norm", "conv1d", "A_log", "dt_bias")  # parameters the engine keeps in fp32


def run(m, rows):
    routes = []
    hooks = [mod.register_forward_hook(lambda mod, i, o: routes.append(o[2].tolist()))
             for n, mod in m.named_modules() if n.endswith("mlp.gate")]
    total, count = 0.0, 0
    with torch.no_grad():
        for r in rows:
            logits = m(input_ids=torch.tensor([r["input_ids"]])).logits[0].float()
            tgt = torch.tensor(r["labels"])[1:]
            total += F.cross_entropy(logits[:-1], tgt, ignore_index=-100, reduction="sum").item()
            count += int((tgt != -100).sum())
    for h in hooks:
        h.remove()
    return total / count, [r for layer in routes for r in layer]


def flips(a, b):
    return sum(set(x) != set(y) for x, y in zip(a, b))


def load(path, dtype):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")


def main():
    torch.set_num_threads(2)
    for name in sys.argv[1:] or NAMES:
        path = os.path.join(OUT, name)
        gfile = os.path.join(path, "golden_eval.json")
        with open(gfile) as f:
            golden = json.load(f)
        rows = [json.loads(l) for l in open(os.path.join(path, "golden_eval.jsonl"))]
        m = load(path, torch.float32)
        l32, r32 = run(m, rows)
        assert abs(l32 - golden["loss"]) <= 1e-6 * golden["loss"], (name, l32, golden["loss"])
        with torch.no_grad():
            for n, p in m.named_parameters():
                if not any(k in n for k in KEPT_F32):
                    p.copy_(p.to(torch.bfloat16).float())
        lmat, rmat = run(m, rows)
        lbf, rbf = run(load(path, torch.bfloat16), rows)
        golden["loss_bf16_matrices"] = lmat
        golden["loss_hf_bf16"] = lbf
        if r32:
            golden["router_flips_bf16_matrices"] = flips(r32, rmat)
            golden["router_flips_hf_bf16"] = flips(r32, rbf)
            golden["router_decisions"] = len(r32)
        golden["bf16_references_transformers_version"] = transformers.__version__
        with open(gfile, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")
        print(f"{name:15s} fp32 {golden['loss']:.6f}  bf16 matrices {lmat:.6f} (rel {abs(lmat - l32) / l32:.2e}"
              f", flips {golden.get('router_flips_bf16_matrices', '-')})  HF bf16 {lbf:.6f} (rel "
              f"{abs(lbf - l32) / l32:.2e}, flips {golden.get('router_flips_hf_bf16', '-')} of "
              f"{golden.get('router_decisions', '-')})", flush=True)


if __name__ == "__main__":
    main()
