"""The golden image sequence of model_golden.safetensors (the sequence the C++ vision tests use) as the keyword
inputs of transformers' Qwen3_5ForConditionalGeneration: input_ids, labels, the images' pixel_values and
image_grid_thw (this folder's image processor, PIL backend) and mm_token_type_ids. Read relative to the current
folder: call it from this folder (make_lora_goldens.py and check_peft_reload.py chdir here first).
"""
import json

import torch
from PIL import Image
from safetensors.numpy import load_file
from transformers import AutoImageProcessor

IMAGE_TOKEN = 250


def golden_image_inputs():
    meta_proc = json.load(open("processor_golden.json"))
    meta_model = json.load(open("model_golden.json"))
    golden = load_file("model_golden.safetensors")
    proc = AutoImageProcessor.from_pretrained("model", backend="pil")
    batch = proc(images=[Image.open(meta_proc["images"][k]["file"]) for k in meta_model["images_in_sequence"]],
                 return_tensors="pt")
    ids = torch.tensor(golden["input_ids"], dtype=torch.long)[None]
    labels = torch.tensor(golden["labels"], dtype=torch.long)[None]
    return {"input_ids": ids, "labels": labels, "pixel_values": batch["pixel_values"],
            "image_grid_thw": batch["image_grid_thw"], "mm_token_type_ids": (ids == IMAGE_TOKEN).long()}
