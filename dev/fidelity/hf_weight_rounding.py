#!/usr/bin/env python3
"""Which weights' bf16 rounding moves the fp32 loss of the F32 golden checkpoints (lab script, dev/).

HF fp32 forward with a chosen subset of the parameters rounded to bf16 (a bf16 engine keeps its frozen weights in
bf16): prints the loss's relative distance to the golden and the router top-k flips against the fp32 forward.
  python3 dev/fidelity/hf_weight_rounding.py [NAME...]
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

GOLDENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "goldens")
sys.path.insert(0, GOLDENS)
from add_bf16_references import flips, run  # noqa: E402  (the loss and routing of the golden references)

ROOT = os.path.join(GOLDENS, "models")
NAMES = ["moe_tied", "moe_per_expert", "moe_vl_quirks", "dense_vl"]


SUBSETS = {
    "none": lambda n: False,
    "all": lambda n: True,
    "all but router": lambda n: not n.endswith("mlp.gate.weight"),
    "router only": lambda n: n.endswith("mlp.gate.weight"),
    "all but router+shared gate": lambda n: not (n.endswith("mlp.gate.weight") or "shared_expert_gate" in n),
    "all but norms": lambda n: "norm" not in n,
    "all but embed/head": lambda n: "embed_tokens" not in n and "lm_head" not in n,
    "experts only": lambda n: ".experts." in n,
}


def main():
    torch.set_num_threads(2)
    for name in sys.argv[1:] or NAMES:
        d = os.path.join(ROOT, name)
        hf = json.load(open(os.path.join(d, "golden_eval.json")))["loss"]
        rows = [json.loads(l) for l in open(os.path.join(d, "golden_eval.jsonl"))]
        base = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        _, r32 = run(base, rows)
        for label, pick in SUBSETS.items():
            m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
            with torch.no_grad():
                for n, p in m.named_parameters():
                    if pick(n):
                        p.copy_(p.to(torch.bfloat16).float())
            loss, r = run(m, rows)
            print(f"{name:15s} rounded: {label:28s} loss {loss:.6f} rel {abs(loss - hf) / hf:.2e} flips {flips(r32, r)}",
                  flush=True)


if __name__ == "__main__":
    main()
