#!/usr/bin/env python3
"""Vision-tower goldens: a tiny random Qwen3_5ForConditionalGeneration run by transformers in fp32 on the CPU.

Needs torch, transformers (5.x; versions written into model_golden.json), safetensors, numpy, Pillow; run
make_processor_goldens.py first (its images and preprocessor_config.json are this model's inputs). Writes
next to this file:

  model/         the checkpoint as save_pretrained writes it (model.language_model.*, model.visual.*, lm_head)
                 plus preprocessor_config.json. Vision: depth 2, hidden 32, 2 heads (head_dim 16), MLP 64,
                 patch 16, temporal 2, merge 2, num_position_embeddings 16 (a 4x4 table, interpolated to each
                 grid), out_hidden_size 64. Text: H 64, layers [linear, full], vocab 256, image token 250,
                 vision start/end 248/249. Every parameter drawn from N(0, 0.3) (LayerNorm weights 1 + N(0, 0.3))
                 so no part of the tower is near identity.
  model_golden.safetensors
     image_embeds_<i>  float32 [tokens_i, 64]: model.get_image_features for image i of processor_golden.json
                       (merger output, one row per merged token)
     vision_hidden_<i> float32 [patches_i, 32]: the last block's output before the merger (same order as rows
                       of pixel_values)
     input_ids int32 [T], labels int32 [T]: one chat-shaped sequence with two images (image pads expanded as
                       HF's processor does; labels -100 on prompt and image tokens)
     position_ids int32 [3, T]: model.get_rope_index for it (T, H, W rows)
     text_rope_cos, text_rope_sin float32 [T, 16]: the text model's rotary_emb for those positions (mrope
                       section [2, 3, 3] interleaved over 8 frequencies, partial rotary 0.5 of head_dim 32)
  model_golden.json  `loss` of Qwen3_5ForConditionalGeneration(input_ids, pixel_values, image_grid_thw, labels)
                     and the library versions.
"""
import json
import os

import numpy as np
import PIL
import torch
import transformers
from PIL import Image
from safetensors.numpy import save_file
from transformers import AutoImageProcessor, Qwen3_5Config, Qwen3_5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model")
IMAGE_TOKEN, VISION_START, VISION_END = 250, 248, 249


def make_model():
    cfg = Qwen3_5Config(
        text_config=dict(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"], num_attention_heads=2, num_key_value_heads=1,
            head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 3, 3], "mrope_interleaved": True},
            tie_word_embeddings=False),
        vision_config=dict(depth=2, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=64,
                           num_heads=2, in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                           out_hidden_size=64, num_position_embeddings=16),
        image_token_id=IMAGE_TOKEN, video_token_id=251, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False)
    torch.manual_seed(35)
    model = Qwen3_5ForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn_like(p) * 0.3
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or "merger.norm.weight" in name:
                p.copy_(1 + noise)
            elif "A_log" in name or "dt_bias" in name or "layernorm" in name or "norm.weight" in name:
                continue  # text-model parameters keep HF's init (their ranges matter for stability)
            else:
                p.copy_(noise)
    model.config._attn_implementation = "eager"
    return model


def main():
    meta_proc = json.load(open(os.path.join(HERE, "processor_golden.json")))
    proc = AutoImageProcessor.from_pretrained(HERE, backend="pil")
    model = make_model()
    os.makedirs(MODEL, exist_ok=True)
    model.save_pretrained(MODEL, safe_serialization=True)
    proc.save_pretrained(MODEL)

    out, meta = {}, {"transformers": transformers.__version__, "torch": torch.__version__, "pillow": PIL.__version__}
    with torch.no_grad():
        for i, row in enumerate(meta_proc["images"]):
            b = proc(images=[Image.open(os.path.join(HERE, row["file"]))], return_tensors="pt")
            vis = model.model.visual(b["pixel_values"], grid_thw=b["image_grid_thw"])
            out[f"vision_hidden_{i}"] = vis.last_hidden_state.numpy().astype(np.float32)
            out[f"image_embeds_{i}"] = vis.pooler_output.numpy().astype(np.float32)

        # A sequence with two images (0 and 4): text, image, text, image, text; labels on the last text only.
        picks = [0, 4]
        batch = proc(images=[Image.open(os.path.join(HERE, meta_proc["images"][k]["file"])) for k in picks],
                     return_tensors="pt")
        grids = batch["image_grid_thw"]
        rng = np.random.default_rng(35)
        ids, labels = [], []

        def text(n, trained):
            t = rng.integers(0, 240, n).tolist()
            ids.extend(t)
            labels.extend(t if trained else [-100] * n)

        for k, g in enumerate(grids.tolist()):
            text(5 + 2 * k, False)
            n = g[0] * g[1] * g[2] // 4
            ids.extend([VISION_START] + [IMAGE_TOKEN] * n + [VISION_END])
            labels.extend([-100] * (n + 2))
        text(9, True)
        input_ids = torch.tensor([ids])
        mm_token_type_ids = (input_ids == IMAGE_TOKEN).long()
        try:
            pos, _ = model.model.get_rope_index(input_ids, mm_token_type_ids=mm_token_type_ids,
                                                image_grid_thw=grids)
        except TypeError:
            pos, _ = model.model.get_rope_index(input_ids, image_grid_thw=grids)
        res = model(input_ids=input_ids, pixel_values=batch["pixel_values"], image_grid_thw=grids,
                    labels=torch.tensor([labels]), mm_token_type_ids=mm_token_type_ids)
        out["input_ids"] = np.array(ids, dtype=np.int32)
        out["labels"] = np.array(labels, dtype=np.int32)
        out["position_ids"] = pos[:, 0].numpy().astype(np.int32)
        cos, sin = model.model.language_model.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
        out["text_rope_cos"] = cos[0].numpy().astype(np.float32)
        out["text_rope_sin"] = sin[0].numpy().astype(np.float32)
        meta["loss"] = float(res.loss)
        meta["images_in_sequence"] = picks
    save_file(out, os.path.join(HERE, "model_golden.safetensors"))
    with open(os.path.join(HERE, "model_golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(meta, {k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
