#!/usr/bin/env python3
"""Image-processor goldens: a few generated images, decoded by PIL and preprocessed by transformers.

Needs numpy, Pillow, torch and transformers (5.x; the versions used are written into processor_golden.json).
Runs on a CPU. Writes next to this file:

  images/          the generated images: PNG (RGB, RGBA with alpha, grayscale, palette), JPEG (RGB, 4:2:0), WebP
                   (lossless), of different sizes: one below min_pixels (upscaled), one above max_pixels
                   (downscaled), one whose rounded size is within range (resized by less than a patch).
  preprocessor_config.json   Qwen3.5's settings (patch 16, temporal patch 2, merge 2, mean = std = 0.5) with a
                   small pixel range (min 2048, max 6144) so the goldens stay small.
  processor_golden.safetensors  per image i: `decoded_i` (uint8 [H, W, 3], PIL's open + convert_to_rgb) and
                   `pixel_values_i` (float32 [rows, 1536], the processor's output for that image alone).
  processor_golden.json  per image: file, decoded size, image_grid_thw, the processor class, the library versions.
"""
import json
import os

import numpy as np
import PIL
import torch
import transformers
from PIL import Image
from safetensors.numpy import save_file
from transformers import AutoImageProcessor
from transformers.image_transforms import convert_to_rgb

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "images")

PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "do_resize": True,
    "resample": 3,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": True,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "size": {"shortest_edge": 2048, "longest_edge": 6144},
}


def smooth_rgb(rng, h, w):
    """Gradients plus noise: resampling and JPEG both have something to do."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([128 + 100 * np.sin(x / 7 + c) * np.cos(y / 5 - c) for c in range(3)], axis=-1)
    return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)


def make_images():
    rng = np.random.default_rng(35)
    os.makedirs(IMAGES, exist_ok=True)
    out = []

    def save(name, img, **kw):
        img.save(os.path.join(IMAGES, name), **kw)
        out.append(name)

    save("rgb_36x40.png", Image.fromarray(smooth_rgb(rng, 40, 36)))  # upscaled to min_pixels
    alpha = smooth_rgb(rng, 100, 130)[..., :1]
    alpha[:10] = 0  # fully transparent rows
    alpha[10:20] = 255
    rgba = np.concatenate([smooth_rgb(rng, 100, 130), alpha], -1)
    save("rgba_130x100.png", Image.fromarray(rgba, "RGBA"))  # downscaled to max_pixels, alpha onto white
    save("gray_97x66.png", Image.fromarray(smooth_rgb(rng, 66, 97)[..., 0], "L"))
    save("palette_64x100.png", Image.fromarray(smooth_rgb(rng, 100, 64)).quantize(16))
    save("photo_121x83.jpg", Image.fromarray(smooth_rgb(rng, 83, 121)), quality=85)
    save("lossless_77x120.webp", Image.fromarray(smooth_rgb(rng, 120, 77)), lossless=True)
    return out


def main():
    names = make_images()
    with open(os.path.join(HERE, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    proc = AutoImageProcessor.from_pretrained(HERE)
    tensors, rows = {}, []
    for i, name in enumerate(names):
        image = Image.open(os.path.join(IMAGES, name))
        decoded = np.asarray(convert_to_rgb(image))
        out = proc(images=[Image.open(os.path.join(IMAGES, name))], return_tensors="np")
        tensors[f"decoded_{i}"] = np.ascontiguousarray(decoded)
        tensors[f"pixel_values_{i}"] = np.ascontiguousarray(out["pixel_values"].astype(np.float32))
        rows.append({"file": "images/" + name, "width": decoded.shape[1], "height": decoded.shape[0],
                     "image_grid_thw": [int(v) for v in out["image_grid_thw"][0]]})
        print(name, decoded.shape, rows[-1]["image_grid_thw"])
    save_file(tensors, os.path.join(HERE, "processor_golden.safetensors"))
    meta = {"images": rows, "processor_class": type(proc).__name__, "transformers": transformers.__version__,
            "torch": torch.__version__, "pillow": PIL.__version__}
    with open(os.path.join(HERE, "processor_golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(meta["processor_class"])


if __name__ == "__main__":
    main()
