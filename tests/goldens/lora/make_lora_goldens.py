"""LoRA goldens from Hugging Face transformers + PEFT (fp32, CPU): for each tiny checkpoint of
tests/goldens/models, a PEFT adapter on every target group (random A and B, so every gradient is non-zero),
the loss of tests/goldens/models/<name>/golden_eval.jsonl as `deltatune eval` defines it
(Σ CE over trained targets / their count, one forward per sequence), every LoRA gradient of that loss,
and the adapter after one SGD step with lr 1.

Run from anywhere with a Python that has torch, transformers and peft:
  python tests/goldens/lora/make_lora_goldens.py   (writes tests/goldens/lora/<name>/)
The base models are loaded by their path from the repository root, so the adapters' base_model_name_or_path
(what PEFT writes: the path given to from_pretrained) is "tests/goldens/models/<name>", never a machine's path.
"""
import json
import os
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
MODELS = os.path.join("tests", "goldens", "models")  # relative to ROOT (main() runs there)

DENSE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b",
                 "out_proj", "gate_proj", "up_proj", "down_proj"]
CASES = {
    # name: (model class, extra LoraConfig kwargs)
    "dense_vl": ("Qwen3_5ForConditionalGeneration", dict(target_modules=DENSE_TARGETS)),
    "moe_tied": ("Qwen3_5MoeForCausalLM", dict(target_modules=DENSE_TARGETS,
                                                target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])),
}


def load_sequences(path):
    seqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                j = json.loads(line)
                ids = j["input_ids"]
                labels = j.get("labels") or ids
                seqs.append((torch.tensor([ids]), torch.tensor([labels])))
    return seqs


def loss_of(model, seqs):
    total, count = 0.0, 0
    for ids, labels in seqs:
        logits = model(input_ids=ids).logits.float()[0]
        shifted = labels[0, 1:]
        ce = torch.nn.functional.cross_entropy(logits[:-1], shifted, ignore_index=-100, reduction="sum")
        total = total + ce
        count += int((shifted != -100).sum())
    return total / count, count


def main():
    os.chdir(ROOT)
    torch.manual_seed(1234)
    for name, (cls_name, kwargs) in CASES.items():
        model_dir = os.path.join(MODELS, name)
        if not os.path.isdir(model_dir):
            print("skip", name, "(no checkpoint)")
            continue
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cls = getattr(transformers, cls_name)
        model = cls.from_pretrained(model_dir, torch_dtype=torch.float32)
        cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, **kwargs)
        peft_model = get_peft_model(model, cfg)
        with torch.no_grad():  # random B too (PEFT's init_lora_weights=False randomises A, B)
            for n, p in peft_model.named_parameters():
                if "lora_" in n:
                    p.mul_(0.5)
        peft_model.save_pretrained(os.path.join(out, "adapter"))
        seqs = load_sequences(os.path.join(model_dir, "golden_eval.jsonl"))
        loss, count = loss_of(peft_model, seqs)
        loss.backward()
        grads, stepped = {}, {}
        for n, p in peft_model.named_parameters():
            if p.requires_grad:
                key = n.replace(".default", "")
                grads[key] = p.grad.detach().clone().contiguous()
                stepped[key] = (p.detach() - p.grad).contiguous()
        save_file(grads, os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})
        save_file(stepped, os.path.join(out, "sgd_step.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"loss": float(loss), "targets": count, "model_class": cls_name,
                       "transformers": transformers.__version__, "num_grads": len(grads)}, f, indent=1)
        print(name, "loss", float(loss), "grads", len(grads))


if __name__ == "__main__":
    main()
