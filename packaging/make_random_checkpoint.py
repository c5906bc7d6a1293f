# A random-weight Qwen3.5 checkpoint at a real model's shape (bench/train_step/hf_train_step.py's SHAPES), bf16,
# saved by transformers with the given folder's tokenizer files: for the package's GPU check.
#   python3 packaging/make_random_checkpoint.py SHAPE OUT_DIR TOKENIZER_DIR
import os, shutil, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "train_step"))
from hf_train_step import random_model  # noqa: E402

shape, out, tok = sys.argv[1:4]
model, _ = random_model(shape, device="cuda" if torch.cuda.is_available() else "cpu")
model.save_pretrained(out)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tok, f), out)
print(f"{shape}: {sum(p.numel() for p in model.parameters())} parameters in {out}")
