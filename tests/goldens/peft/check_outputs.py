"""Checks what DeltaTune wrote against PEFT itself (run by check_all.sh; needs torch, transformers, peft).

For every case of fixtures/ (PEFT-made reference adapters):
  OUT/<case>/ours    our peft_adapter_write of the adapter we read from the reference
    - PeftModel.from_pretrained loads it; load_adapter reports no missing and no unexpected LoRA keys;
    - the logits equal those of the reference adapter exactly (same F32 values, same targets/ranks/scalings).
  OUT/<case>/merged  our merged_checkpoint_write of the reference adapter onto the base
    - same tensor names, dtypes, shapes and shard files as the base; untouched tensors byte-identical;
    - adapted tensors vs PEFT merge_and_unload(): 3-D experts bit-exact, linears within 1 ulp of the stored
      dtype (fp32 summation order of B@A may differ from torch's), F32 bases exact.
Usage: check_outputs.py OUT MODELS
"""
import glob
import json
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen3_5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def load_base(path, cls, dtype):
    if cls == "conditional_generation":
        return Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=dtype).eval()
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def text_key(k):
    for p in ("model.language_model.", "model."):
        if k.startswith(p) and k[len(p):].startswith("layers."):
            return k[len(p):]
    return k


def check_adapter(case, fx, model_dir, ours, ref):
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref_model = PeftModel.from_pretrained(load_base(model_dir, fx["class"], torch.float32), ref)
        want = ref_model(input_ids=ids).logits
        model = PeftModel.from_pretrained(load_base(model_dir, fx["class"], torch.float32), ours)
        got = model(input_ids=ids).logits
        base_logits = load_base(model_dir, fx["class"], torch.float32)(input_ids=ids).logits
    res = model.load_adapter(ours, adapter_name="check")
    missing = [k for k in res.missing_keys if "lora_" in k and ".check." in k]
    unexpected = [k for k in res.unexpected_keys if "lora_" in k]
    if missing:
        fail(f"{case}: PEFT reports missing adapter keys: {missing[:4]}")
    if unexpected:
        fail(f"{case}: PEFT reports unexpected adapter keys: {unexpected[:4]}")
    diff = (got - want).abs().max().item()
    moved = (want - base_logits).abs().max().item()
    if diff != 0.0:
        fail(f"{case}: logits with our adapter differ from the reference by {diff} (adapter moves logits by {moved})")
    if moved == 0.0:
        fail(f"{case}: the reference adapter does not change the logits; the check would prove nothing")
    print(f"{case}: adapter: {len(missing)} missing / {len(unexpected)} unexpected LoRA keys; logits max |diff| = "
          f"{diff} (adapter effect {moved:.3g})")


def ulp(x):
    # Spacing of the stored dtype at |x| (bf16: 8 bits of mantissa, f16: 11, f32: 24).
    bits = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}[x.dtype]
    xf = x.float().abs().clamp_min(torch.finfo(x.dtype).tiny)
    return torch.pow(2.0, torch.floor(torch.log2(xf)) - (bits - 1))


def check_merged(case, fx, model_dir, merged, ref):
    base_files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(model_dir, "*.safetensors")))
    our_files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(merged, "*.safetensors")))
    if base_files != our_files:
        fail(f"{case}: merged shard files {our_files} != base {base_files}")
        return
    base_t, ours_t = {}, {}
    for f in base_files:
        base_t.update(load_file(os.path.join(model_dir, f)))
        ours_t.update(load_file(os.path.join(merged, f)))
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        if json.load(open(idx))["weight_map"] != json.load(open(os.path.join(merged, os.path.basename(idx))))["weight_map"]:
            fail(f"{case}: index weight_map differs")
    if set(base_t) != set(ours_t):
        fail(f"{case}: merged key set differs from the base")
        return
    # PEFT's merge in the checkpoint's dtype, into the class the adapter was made for (keys are per class).
    with torch.no_grad():
        model = PeftModel.from_pretrained(load_base(model_dir, fx["class"], "auto"), ref).merge_and_unload()
    peft_sd = {text_key(k): v for k, v in model.state_dict().items()}
    # Our per-expert tensors fused as transformers does at load.
    ours_text = {text_key(k): v for k, v in ours_t.items()}
    base_text = {text_key(k): v for k, v in base_t.items()}
    for d in (ours_text, base_text):
        for k in [k for k in d if k.endswith(".experts.0.down_proj.weight")]:
            p = k[: -len(".0.down_proj.weight")]
            n = len([x for x in d if x.startswith(p + ".") and x.endswith(".down_proj.weight")])
            d[p + ".gate_up_proj"] = torch.stack(
                [torch.cat([d[f"{p}.{e}.gate_proj.weight"], d[f"{p}.{e}.up_proj.weight"]]) for e in range(n)])
            d[p + ".down_proj"] = torch.stack([d[f"{p}.{e}.down_proj.weight"] for e in range(n)])
    changed = worst = 0
    for k, pv in peft_sd.items():
        if k not in ours_text:
            continue  # e.g. tied lm_head
        o, b = ours_text[k], base_text[k]
        if o.dtype != b.dtype or o.shape != b.shape:
            fail(f"{case}: {k} dtype/shape {o.dtype}{tuple(o.shape)} != base {b.dtype}{tuple(b.shape)}")
            continue
        pv = pv.to(o.dtype)
        if torch.equal(pv, b):
            if not torch.equal(o, b):
                fail(f"{case}: {k} is not adapted by PEFT but our merged export changed it")
            continue
        changed += 1
        err = ((o.double() - pv.double()).abs() / ulp(pv)).max().item()
        worst = max(worst, err)
        limit = 0 if (k.endswith("gate_up_proj") or k.endswith("experts.down_proj") or o.dtype == torch.float32) else 1
        if err > limit:
            fail(f"{case}: {k} differs from PEFT merge_and_unload by {err} ulp (allowed {limit})")
    if changed == 0:
        fail(f"{case}: PEFT's merge changed no tensor")
    print(f"{case}: merged export: {changed} adapted tensors, worst {worst} ulp vs PEFT merge_and_unload")


def main(out, models):
    for fxdir in sorted(glob.glob(os.path.join(HERE, "fixtures", "*"))):
        case = os.path.basename(fxdir)
        fx = json.load(open(os.path.join(fxdir, "fixture.json")))
        model_dir = os.path.join(models, fx["model"])
        ref = os.path.join(fxdir, "adapter")
        check_adapter(case, fx, model_dir, os.path.join(out, case, "ours"), ref)
        check_merged(case, fx, model_dir, os.path.join(out, case, "merged"), ref)
    print("ALL OK" if not failures else f"{len(failures)} FAILURE(S)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
