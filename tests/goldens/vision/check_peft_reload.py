#!/usr/bin/env python3
"""Loads a folder exported by `deltatune export` into transformers' Qwen3_5ForConditionalGeneration (fp32, CPU):
an adapter with PEFT (PeftModel.from_pretrained onto the golden model), or a merged checkpoint (`--merged`: a
folder with config.json) as the model itself, and prints its loss on the golden image sequence of
model_golden.safetensors (the sequence make_lora_goldens.py and the C++ vision tests use), next to the loss
given on the command line (ours). Usage: check_peft_reload.py DIR [OUR_LOSS]. Exit status 1 when OUR_LOSS is
given and differs by more than 1e-5 relative (the CPU bar).
"""
import json
import os
import sys

import torch
from peft import PeftModel
from transformers import Qwen3_5ForConditionalGeneration

from golden_image_sequence import golden_image_inputs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    folder = os.path.abspath(sys.argv[1])
    os.chdir(HERE)
    merged = os.path.exists(os.path.join(folder, "config.json"))
    model = Qwen3_5ForConditionalGeneration.from_pretrained(folder if merged else "model", dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    pm = model if merged else PeftModel.from_pretrained(model, folder).eval()
    with torch.no_grad():
        res = pm(**golden_image_inputs())
    loss = float(res.loss)
    lora = sum(1 for n, _ in pm.named_parameters() if "lora_" in n)
    print(json.dumps({"merged" if merged else "peft_loss": loss, "lora_tensors_loaded": lora}))
    if len(sys.argv) > 2:
        ours = float(sys.argv[2])
        rel = abs(loss - ours) / abs(loss)
        print(json.dumps({"ours": ours, "rel": rel}))
        sys.exit(0 if rel <= 1e-5 else 1)


if __name__ == "__main__":
    main()
