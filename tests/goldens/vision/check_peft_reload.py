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
from PIL import Image
from safetensors.numpy import load_file
from transformers import AutoImageProcessor, Qwen3_5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE_TOKEN = 250


def main():
    folder = os.path.abspath(sys.argv[1])
    os.chdir(HERE)
    merged = os.path.exists(os.path.join(folder, "config.json"))
    model = Qwen3_5ForConditionalGeneration.from_pretrained(folder if merged else "model", dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    pm = model if merged else PeftModel.from_pretrained(model, folder).eval()
    meta_proc = json.load(open("processor_golden.json"))
    meta_model = json.load(open("model_golden.json"))
    golden = load_file("model_golden.safetensors")
    proc = AutoImageProcessor.from_pretrained("model", backend="pil")
    batch = proc(images=[Image.open(meta_proc["images"][k]["file"]) for k in meta_model["images_in_sequence"]],
                 return_tensors="pt")
    ids = torch.tensor(golden["input_ids"], dtype=torch.long)[None]
    labels = torch.tensor(golden["labels"], dtype=torch.long)[None]
    with torch.no_grad():
        res = pm(input_ids=ids, pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"],
                 labels=labels, mm_token_type_ids=(ids == IMAGE_TOKEN).long())
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
