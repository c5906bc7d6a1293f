#!/usr/bin/env python3
"""Greedy generation goldens from Hugging Face `generate` (fp32, CPU) on the tiny checkpoints of
tests/goldens/models, with and without the PEFT adapters of tests/goldens/lora.

For every case: three random prompts (5, 23 and 70 tokens: 70 > HF's GDN chunk of 64), each generated alone
with `model.generate(ids, max_new_tokens=64, do_sample=False)` (the checkpoint's generation_config.json: it
stops at eos_token_id 1), use_cache on, so HF prefills with its torch chunked GDN path and decodes with its
recurrent path and KV cache. Recorded per prompt: the prompt ids, the generated ids (an eos included) and, per
step, the gap between the two largest logits (a divergence at a step whose gap is ~1e-5 is a near tie, not a
bug).

Run: python tests/goldens/generate/make_generate_goldens.py OUT_JSON
(transformers 5.17 + peft 0.21 + torch; CPU; writes OUT_JSON, normally tests/goldens/generate/golden_generate.json)
"""
import json
import os
import sys

import peft
import torch
import transformers
from peft import PeftModel

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
LORA = os.path.join(HERE, "..", "lora")
LENGTHS = [5, 23, 70]
NEW_TOKENS = 64

CASES = [
    # name, model folder, HF class, adapter folder (or None)
    ("dense_vl", "dense_vl", "Qwen3_5ForConditionalGeneration", None),
    ("dense_vl_lora", "dense_vl", "Qwen3_5ForConditionalGeneration", "dense_vl"),
    ("dense_bf16", "dense_bf16", "Qwen3_5ForCausalLM", None),
    ("moe_tied", "moe_tied", "Qwen3_5MoeForCausalLM", None),
    ("moe_tied_lora", "moe_tied", "Qwen3_5MoeForCausalLM", "moe_tied"),
    ("moe_vl_quirks", "moe_vl_quirks", "Qwen3_5MoeForConditionalGeneration", None),
]


def main():
    out_path = sys.argv[1]
    torch.manual_seed(0)
    cases = []
    for i, (name, model_name, cls_name, adapter) in enumerate(CASES):
        model_dir = os.path.join(MODELS, model_name)
        model = getattr(transformers, cls_name).from_pretrained(model_dir, dtype=torch.float32,
                                                                 attn_implementation="eager")
        if adapter:
            model = PeftModel.from_pretrained(model, os.path.join(LORA, adapter, "adapter"))
        model.eval()
        vocab = model.config.get_text_config().vocab_size
        g = torch.Generator().manual_seed(100 + i)
        prompts, outputs, gaps = [], [], []
        for n in LENGTHS:
            ids = torch.randint(2, vocab, (1, n), generator=g)  # no eos (1) / pad (0) inside the prompt
            with torch.no_grad():
                res = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                     do_sample=False, output_logits=True, return_dict_in_generate=True)
            new = res.sequences[0, n:].tolist()
            step_gaps = []
            for lg in res.logits:
                top = torch.topk(lg[0].float(), 2).values
                step_gaps.append(float(top[0] - top[1]))
            prompts.append(ids[0].tolist())
            outputs.append(new)
            gaps.append(step_gaps)
            print(name, n, "->", len(new), "tokens, smallest gap %.2e" % min(step_gaps), flush=True)
        cases.append({"name": name, "model": model_name, "adapter": adapter, "hf_class": cls_name,
                      "prompts": prompts, "outputs": outputs, "top2_gaps": gaps})
    with open(out_path, "w") as f:
        json.dump({"max_new_tokens": NEW_TOKENS, "cases": cases, "transformers_version": transformers.__version__,
                   "peft_version": peft.__version__, "torch_version": torch.__version__}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
