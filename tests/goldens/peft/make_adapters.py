"""PEFT-made LoRA adapters (the reference side of the adapter goldens) for the tiny models of make_models.py.

For each case writes fixtures/<case>/: adapter/ (PeftModel.save_pretrained, init_lora_weights=False so A and B
are both random), config.json (the base model's), fixture.json (model, class, targets).
Run: python tests/goldens/peft/make_adapters.py MODELS_DIR [CASE...]   (after make_models.py MODELS_DIR)
Each base model is loaded by its folder name from inside MODELS_DIR, so base_model_name_or_path (what PEFT
writes: the path given to from_pretrained) is that name ("moe_text"), never a machine's path.
"""
import json
import os
import shutil
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Qwen3_5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_DENSE = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj",
             "gate_proj", "up_proj", "down_proj"]

CASES = {
    # ForConditionalGeneration layout (model.language_model.*), every dense group.
    "dense_cg": dict(model="dense_vl", cls="conditional_generation",
                     lora=dict(r=4, lora_alpha=8, target_modules=ALL_DENSE, task_type="CAUSAL_LM")),
    # ForCausalLM layout, rsLoRA, rank/alpha patterns, a subset of layers, task_type null, tensors stored BF16.
    "dense_clm_patterns": dict(model="dense_vl", cls="causal_lm", bf16=True,
                               lora=dict(r=4, lora_alpha=16, use_rslora=True, target_modules=ALL_DENSE,
                                         layers_to_transform=[1, 2], rank_pattern={"q_proj": 2},
                                         alpha_pattern={"down_proj": 5})),
    # F32 base: the merged export must be exact.
    "dense_f32": dict(model="dense_f32", cls="causal_lm",
                      lora=dict(r=4, lora_alpha=8, target_modules=ALL_DENSE, task_type="CAUSAL_LM")),
    # MoE: attention, linear attention, shared expert and both 3-D expert parameters (nested keys).
    "moe_all": dict(model="moe_text", cls="causal_lm",
                    lora=dict(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z",
                                              "in_proj_a", "in_proj_b", "out_proj", "gate_proj", "up_proj",
                                              "down_proj"],
                              target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])),
    # MoE: one expert parameter only (its keys sit at experts.lora_*, no base_layer).
    "moe_down": dict(model="moe_text", cls="causal_lm",
                     lora=dict(r=2, lora_alpha=4, task_type="CAUSAL_LM", target_modules=["q_proj"],
                               target_parameters=["experts.down_proj"])),
    # layers_to_transform / exclude_modules filter target_modules only: PEFT adapts the expert parameters of
    # every layer (fuzz find: we dropped layer 3's experts and refused the adapter).
    "moe_layers_params": dict(model="moe_text", cls="causal_lm",
                              lora=dict(r=2, lora_alpha=6, task_type="CAUSAL_LM",
                                        target_modules=["in_proj_z", "q_proj", "o_proj"], layers_to_transform=[0, 1],
                                        exclude_modules=["o_proj"], target_parameters=["mlp.experts.down_proj"])),
    # List entries that match nothing in this model (PEFT accepts them while one target matches): the shared
    # expert, a layer past the end, expert parameters of a dense model (fuzz find: we refused the adapter).
    "dense_unmatched": dict(model="dense_f32", cls="causal_lm",
                            lora=dict(r=2, lora_alpha=4, task_type="CAUSAL_LM",
                                      target_modules=["v_proj", "in_proj_b", "shared_expert.up_proj",
                                                      "layers.9.mlp.down_proj"],
                                      target_parameters=["mlp.experts.gate_up_proj"])),
    # target_modules a regex string that matches nothing (PEFT warns, the expert parameter is adapted).
    "moe_regex_params": dict(model="moe_text", cls="causal_lm",
                             lora=dict(r=2, lora_alpha=4, task_type="CAUSAL_LM", target_modules="gate_proj",
                                       target_parameters=["mlp.experts.gate_up_proj"])),
    # "up_proj"/"down_proj" also take the zero-sized shared-expert linears of a model without a shared expert.
    "moe_zero_shared": dict(model="moe_noshared", cls="causal_lm",
                            lora=dict(r=2, lora_alpha=4, task_type="CAUSAL_LM",
                                      target_modules=["q_proj", "up_proj", "down_proj"])),
}


def load_base(path, cls):
    if cls == "conditional_generation":
        return Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype="auto")
    return AutoModelForCausalLM.from_pretrained(path, dtype="auto")


def main(models, only=None):
    models = os.path.abspath(models)
    os.chdir(models)
    for name, case in CASES.items():
        if only and name not in only:
            continue
        torch.manual_seed(7)
        out = os.path.join(HERE, "fixtures", name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        base = load_base(case["model"], case["cls"])
        peft = get_peft_model(base, LoraConfig(init_lora_weights=False, **case["lora"]))
        peft.save_pretrained(os.path.join(out, "adapter"))
        os.remove(os.path.join(out, "adapter", "README.md"))  # boilerplate model card
        if case.get("bf16"):
            path = os.path.join(out, "adapter", "adapter_model.safetensors")
            save_file({k: v.to(torch.bfloat16) for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
        shutil.copy(os.path.join(models, case["model"], "config.json"), os.path.join(out, "config.json"))
        with open(os.path.join(out, "fixture.json"), "w") as f:
            json.dump({"model": case["model"], "class": case["cls"]}, f, indent=2)


if __name__ == "__main__":
    # make_adapters.py [MODELS_DIR [CASE...]]: only the named cases (the others' files stay as committed)
    if len(sys.argv) < 2:
        sys.exit("usage: make_adapters.py MODELS_DIR [CASE...] (MODELS_DIR: the output of make_models.py)")
    main(sys.argv[1], sys.argv[2:])
