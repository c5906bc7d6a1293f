#!/usr/bin/env python3
"""Chat-row goldens for vision data: transformers' Qwen3VLProcessor (the processor Qwen3.5 checkpoints name)
applied to chat rows with image parts, on the tiny checkpoint of make_model_goldens.py (run that first).

Needs tokenizers, transformers (5.x), torch, torchvision (the processor's video half), Pillow. Runs on a CPU.
Writes next to this file:

  model/tokenizer.json, model/tokenizer_config.json
      a byte-level BPE tokenizer that fits the checkpoint's 256-id vocabulary: printable ASCII and newline
      (96 byte tokens) + 144 merges learned from a small corpus (ids 0..239), and the special tokens of
      Qwen3.5 the chat template uses at fixed ids: <|endoftext|> 240, <|im_start|> 241, <|im_end|> 242,
      <think> 243, </think> 244, <tool_call> 245, </tool_call> 246, <|vision_pad|> 247, <|vision_start|> 248,
      <|vision_end|> 249, <|image_pad|> 250, <|video_pad|> 251. Chat template: ../chat/qwen3_5_reconstructed.jinja.
  chat_rows.jsonl     chat rows with image parts (paths relative to this folder, one file:// URL), as a dataset
  chat_golden.jsonl   per row: `input_ids` from processor.apply_chat_template(messages, tokenize=True) (image
                      pads expanded to each image's merged tokens), `image_grid_thw`, and the rendered `text`
  chat_golden.json    library versions
"""
import json
import os
import sys

import PIL
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoImageProcessor, PreTrainedTokenizerFast, Qwen3VLProcessor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
from make_qwen3_5_tokenizer import bytes_to_unicode  # noqa: E402  (GPT-2's byte-to-unicode table)

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model")
SPECIAL = {240: "<|endoftext|>", 241: "<|im_start|>", 242: "<|im_end|>", 243: "<think>", 244: "</think>",
           245: "<tool_call>", 246: "</tool_call>", 247: "<|vision_pad|>", 248: "<|vision_start|>",
           249: "<|vision_end|>", 250: "<|image_pad|>", 251: "<|video_pad|>"}
CORPUS = ["Describe the picture in one sentence.", "What colour is the square on the left?",
          "The image shows a red square on a blue background.", "Count the dots and answer with a number.",
          "There are three dots.", "Compare the two images: which one is brighter?", "The second one is brighter.",
          "user assistant system", "A photo of a small gray cat sitting next to a window at noon."] * 20


def make_tokenizer():
    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    mapping = bytes_to_unicode()
    alphabet = [mapping[b] for b in [10] + list(range(32, 127))]
    assert set(alphabet) <= set(byte_chars)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=240, initial_alphabet=alphabet, limit_alphabet=len(alphabet),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() == 240, tok.get_vocab_size()
    data = json.loads(tok.to_str())
    data["added_tokens"] = [dict(id=i, content=s, single_word=False, lstrip=False, rstrip=False, normalized=False,
                                 special=s not in ("<think>", "</think>", "<tool_call>", "</tool_call>"))
                            for i, s in sorted(SPECIAL.items())]
    with open(os.path.join(MODEL, "tokenizer.json"), "w") as f:
        json.dump(data, f, ensure_ascii=False)
    template = open(os.path.join(HERE, "..", "chat", "qwen3_5_reconstructed.jinja")).read()
    cfg = dict(tokenizer_class="PreTrainedTokenizerFast", eos_token="<|im_end|>", pad_token="<|endoftext|>",
               model_max_length=4096, chat_template=template, extra_special_tokens={"image_token": "<|image_pad|>",
               "video_token": "<|video_pad|>", "vision_bos_token": "<|vision_start|>",
               "vision_eos_token": "<|vision_end|>"})
    with open(os.path.join(MODEL, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1, ensure_ascii=False)


def rows():
    img = lambda name: {"type": "image", "image": "images/" + name}
    text = lambda t: {"type": "text", "text": t}
    return [
        [{"role": "user", "content": [img("rgb_36x40.png"), text("Describe the picture in one sentence.")]},
         {"role": "assistant", "content": "The image shows a red square on a blue background."}],
        [{"role": "system", "content": "Answer with a number."},
         {"role": "user", "content": [text("Count the dots."), img("photo_121x83.jpg")]},
         {"role": "assistant", "content": "There are three dots."}],
        [{"role": "user", "content": [text("Compare the two images: which one is brighter?"), img("gray_97x66.png"),
                                      {"type": "image", "image": "file://" + os.path.join(HERE, "images",
                                                                                           "lossless_77x120.webp")}]},
         {"role": "assistant", "content": "The second one is brighter."},
         {"role": "user", "content": [img("rgba_130x100.png"), text("And this one?")]},
         {"role": "assistant", "content": "A photo of a small gray cat."}],
    ]


def main():
    make_tokenizer()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(MODEL)
    image_processor = AutoImageProcessor.from_pretrained(MODEL, backend="pil")
    from transformers import Qwen3VLVideoProcessor
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor(), chat_template=tokenizer.chat_template)
    golden, dataset = [], []
    for messages in rows():
        # The dataset file keeps the relative paths and a machine-independent file:// URL placeholder.
        stored = json.loads(json.dumps(messages).replace("file://" + HERE + "/", "file://@VISION_GOLDENS@/"))
        dataset.append({"messages": stored})
        resolved = json.loads(json.dumps(messages))
        for m in resolved:
            if isinstance(m["content"], list):
                for p in m["content"]:
                    if p.get("type") == "image":  # transformers reads paths, not file:// URLs
                        loc = p["image"]
                        p["image"] = loc[len("file://"):] if loc.startswith("file://") else os.path.join(HERE, loc)
        out = processor.apply_chat_template(resolved, tokenize=True, return_dict=True, return_tensors="pt")
        text = processor.apply_chat_template(resolved, tokenize=False)
        golden.append({"input_ids": out["input_ids"][0].tolist(), "image_grid_thw": out["image_grid_thw"].tolist(),
                       "text": text})
    with open(os.path.join(HERE, "chat_rows.jsonl"), "w") as f:
        for d in dataset:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(HERE, "chat_golden.jsonl"), "w") as f:
        for g in golden:
            f.write(json.dumps(g) + "\n")
    meta = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "torch": torch.__version__, "pillow": PIL.__version__, "processor": type(processor).__name__}
    with open(os.path.join(HERE, "chat_golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(meta, [len(g["input_ids"]) for g in golden])


if __name__ == "__main__":
    main()
