#!/usr/bin/env python3
"""Tiny Qwen3.5 checkpoints + reference losses/logits from Hugging Face transformers.

Run with a Python that has (`make_checkpoints.py [NAME...]` remakes only those models; transformers 5.23, torch 2.15 CPU, no flash-linear-attention / causal-conv1d /
kernels, so HF runs its PyTorch GDN path: torch_chunk_gated_delta_rule + F.conv1d). Writes
tests/goldens/models/<name>/ with config.json, safetensors, golden_eval.jsonl and golden_eval.json.

Models (all weights random, including every norm, A_log, dt_bias and conv tap: zero/one init hides bugs):
  dense_vl        Qwen3_5ForConditionalGeneration (tiny vision tower), F32, untied lm_head, explicit
                  layer_types [lin, full, lin, lin, full], H 64, nH 4, nKV 2, hd 32 (partial rotary 0.25 ->
                  rotary dim 8), HK 2, HV 4 (GVA r=2), dk 16 != dv 24, I 96, vocab 512, conv K 4.
                  A fake `mtp.*` tensor pair is appended to the safetensors (skipping test);
                  tokenizer_config.json (chat template) copied from the shared Qwen3 tokenizer folder.
  moe_tied        Qwen3_5MoeForCausalLM flat config, F32, tied embeddings, E 4, top-k 2, Ie 32, Is 48, HK = HV
                  = 2, 4 layers; `layer_types` removed from config.json and `full_attention_interval: 2` put
                  in its place (layers 1 and 3 full attention).
  dense_bf16      Qwen3_5ForCausalLM, BF16, 2 shards + index, HV/HK = 3 (GVA r=3), rope given by the legacy
                  top-level `rope_theta` / `partial_rotary_factor` keys (rope_parameters removed from the json).
                  The golden is HF run in fp32 on the bf16 weights (upcast exactly), i.e. what a fp32 engine
                  must reproduce.
  moe_per_expert  Qwen3_5MoeForCausalLM, 2 layers, untied, experts stored per expert
                  (mlp.experts.{e}.{gate,up,down}_proj.weight, 2-D), which is what HF 5.23's save_pretrained
                  writes for MoE models; HF loads it through its qwen2_moe converter, and the script checks the
                  same weights in the fused layout give identical logits.
  moe_vl_quirks   Qwen3_5MoeForConditionalGeneration (tiny vision tower), F32, tied, H 32, 3 layers [full, lin, lin]
                  (full attention first), nKV 1 of nH 4 (GQA 4), hd 16 with full rotary, HK 1 / HV 4 (GVA r=4),
                  dk 32 != dv 8, conv K 2, E 4 top-1, shared_expert_intermediate_size 0 (HF builds a
                  zero-width shared expert: it adds nothing), rms_norm_eps 1e-5, hidden_act "swish" (SiLU in
                  HF's ACT2FN). The vision tower is stored under the older top-level `visual.*` prefix (HF
                  loads it); fake `mtp.*` tensors; text_config has both `rope_parameters` and a legacy
                  `rope_scaling` dict, and HF lets `rope_scaling` win (theta 5000, partial factor 1.0).
Official MoE checkpoints store experts fused ([E, 2Ie, H] `experts.gate_up_proj`, [E, H, Ie] `experts.down_proj`),
so moe_tied is rewritten into that layout after saving (and checked against the in-memory model).

golden_eval.jsonl: 3 sequences (7, 29 and 70 tokens: 70 > HF's GDN chunk of 64), random ids, labels with
some -100. golden_eval.json: loss as `deltatune eval` defines it = sum over sequences of CE(logits[t],
labels[t+1]) over non-ignored targets / their count (each sequence run alone through HF, so nothing leaks
between them), per-sequence sums and counts, fp32 logits of the first sequence, and HF's text-model parameter
count sum(p.numel()) (Qwen3_5(Moe)ForCausalLM; tied weights counted once).
"""
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
# Qwen3's tokenizer_config.json (its chat template) goes into the VL model's folder: DT_QWEN3_DIR names the
# folder of Qwen/Qwen3-0.6B's tokenizer files.
TOKENIZER_DIR = os.environ.get("DT_QWEN3_DIR", "")
LENGTHS = [7, 29, 70]


def randomise(model, seed):
    """Weights that keep activations O(1) and make every parameter matter."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".visual." in name or name.startswith("model.visual"):
                continue
            if name.endswith("linear_attn.norm.weight"):  # plain multiplier (init 1)
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif "norm" in name:  # zero-centred (1 + w) norms: input/post/final/q/k
                p.copy_(normal(p.shape, 0.1))
            elif name.endswith("A_log"):
                p.copy_((torch.rand(p.shape, generator=g) * 7.5 + 0.5).log())
            elif name.endswith("dt_bias"):
                p.copy_(normal(p.shape, 0.5))
            elif name.endswith("conv1d.weight"):
                p.copy_(normal(p.shape, 0.5))
            elif name.endswith("embed_tokens.weight"):
                # A tied embedding is also the head: scale so logits stay O(1) (std 1 would give ~40).
                tied = model.config.get_text_config().tie_word_embeddings
                p.copy_(normal(p.shape, p.shape[1] ** -0.5 if tied else 1.0))
            elif p.dim() == 3:  # experts: gate_up [E, 2Ie, H], down [E, H, Ie]
                p.copy_(normal(p.shape, p.shape[2] ** -0.5))
            elif p.dim() == 2:  # nn.Linear [out, in]
                p.copy_(normal(p.shape, p.shape[1] ** -0.5))
            else:
                raise RuntimeError(f"no init rule for {name} {tuple(p.shape)}")


def make_sequences(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in LENGTHS:
        ids = torch.randint(0, vocab, (n,), generator=g)
        labels = ids.clone()
        labels[:2] = -100  # a masked prompt
        labels[torch.rand(n, generator=g) < 0.2] = -100  # and scattered ignored targets
        rows.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    return rows


def run_golden(model, rows):
    """Per-sequence logits and CE sums (position t predicts labels[t+1])."""
    model.eval()
    out = {"per_sequence": []}
    total, count = 0.0, 0
    with torch.no_grad():
        for i, r in enumerate(rows):
            ids = torch.tensor([r["input_ids"]])
            labels = torch.tensor(r["labels"])
            logits = model(input_ids=ids).logits[0].float()
            tgt = labels[1:]
            s = F.cross_entropy(logits[:-1], tgt, ignore_index=-100, reduction="sum").item()
            c = int((tgt != -100).sum())
            # HF's own loss (mean over this sequence's targets) must agree with ours.
            hf = model(input_ids=ids, labels=labels[None]).loss.item()
            assert abs(hf * c - s) <= 1e-4 * max(1.0, abs(s)), (hf * c, s)
            out["per_sequence"].append({"length": len(r["input_ids"]), "loss_sum": s, "count": c})
            total += s
            count += c
            if i == 0:
                out["logits_first"] = logits.tolist()
    out["loss"] = total / count
    out["count"] = count
    return out, torch.tensor(out["logits_first"])


def load(cls, path):
    """HF model from disk in fp32; every parameter must come from the checkpoint (no random fill-ins)."""
    m, info = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"], info["mismatched_keys"]
    return m


def fuse_experts(tensors, E):
    """Per-expert 2-D keys (what HF 5.23's save_pretrained writes) -> the fused 3-D layout of official files."""
    out, groups = {}, {}
    for k, v in tensors.items():
        if ".mlp.experts." in k and k.endswith("_proj.weight"):
            base, rest = k.split(".mlp.experts.")
            e, proj = rest.split(".")[:2]
            groups.setdefault(base, {})[(int(e), proj)] = v
        else:
            out[k] = v
    for base, g in groups.items():
        out[base + ".mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate_proj")], g[(e, "up_proj")]], 0) for e in range(E)]).contiguous()
        out[base + ".mlp.experts.down_proj"] = torch.stack([g[(e, "down_proj")] for e in range(E)]).contiguous()
    return out


def write_outputs(path, rows, golden, extra):
    with open(os.path.join(path, "golden_eval.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    golden = dict(golden)
    golden.update(extra)
    golden["transformers_version"] = transformers.__version__
    golden["torch_version"] = torch.__version__
    with open(os.path.join(path, "golden_eval.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")


def edit_config(path, fn):
    p = os.path.join(path, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def rewrite_safetensors(file, fn):
    with safe_open(file, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors = fn(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def fresh(name):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def common_text(**kw):
    base = dict(
        vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=24,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        eos_token_id=1, pad_token_id=0,
    )
    base.update(kw)
    return base


def make_dense_vl():
    path = fresh("dense_vl")
    torch.manual_seed(1)
    text = common_text(
        num_hidden_layers=5, intermediate_size=96,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"],
    )
    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=32, out_hidden_size=64, patch_size=2,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16, in_channels=3)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = Qwen3_5ForConditionalGeneration(cfg).float()
    randomise(model, 101)
    model.save_pretrained(path)
    H = 64
    g = torch.Generator().manual_seed(5)
    rewrite_safetensors(os.path.join(path, "model.safetensors"), lambda t: {
        **t, "mtp.fc.weight": torch.randn(H, 2 * H, generator=g), "mtp.norm.weight": torch.randn(H, generator=g)})
    if not os.path.isfile(os.path.join(TOKENIZER_DIR, "tokenizer_config.json")):
        sys.exit("set DT_QWEN3_DIR to a folder holding Qwen3's tokenizer_config.json")
    shutil.copy(os.path.join(TOKENIZER_DIR, "tokenizer_config.json"), path)

    rows = make_sequences(512, 11)
    vl = load(Qwen3_5ForConditionalGeneration, path)
    golden, logits = run_golden(vl, rows)
    # The text-only class on the same folder (HF strips language_model.) must give the same logits.
    txt = load(AutoModelForCausalLM, path)
    assert type(txt).__name__ == "Qwen3_5ForCausalLM", type(txt)
    golden_txt, logits_txt = run_golden(txt, rows)
    assert torch.allclose(logits, logits_txt, atol=1e-5), (logits - logits_txt).abs().max()
    n_text = sum(p.numel() for p in txt.parameters())
    write_outputs(path, rows, golden, {
        "model": "dense_vl", "hf_class": "Qwen3_5ForConditionalGeneration (checked equal to Qwen3_5ForCausalLM)",
        "hf_text_params": n_text, "tied": False, "checkpoint_dtype": "F32"})


def make_moe_tied():
    path = fresh("moe_tied")
    torch.manual_seed(2)
    text = common_text(num_hidden_layers=4, linear_num_value_heads=2, num_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=32, shared_expert_intermediate_size=48, tie_word_embeddings=True)
    cfg = Qwen3_5MoeTextConfig(**text, full_attention_interval=2)
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    model = Qwen3_5MoeForCausalLM(cfg).float()
    randomise(model, 202)
    model.save_pretrained(path)
    rewrite_safetensors(os.path.join(path, "model.safetensors"), lambda t: fuse_experts(t, 4))

    def drop_layer_types(c):
        want = c.pop("layer_types")
        assert want == ["linear_attention", "full_attention"] * 2, want
        c["full_attention_interval"] = 2
    edit_config(path, drop_layer_types)

    rows = make_sequences(512, 22)
    m = load(Qwen3_5MoeForCausalLM, path)
    assert m.config.layer_types == ["linear_attention", "full_attention"] * 2, m.config.layer_types
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    golden, logits = run_golden(m, rows)
    # The fused file must hold exactly the model we built.
    mem = dict(model.named_parameters())
    for k, v in m.named_parameters():
        assert torch.equal(v, mem[k]), k
    write_outputs(path, rows, golden, {
        "model": "moe_tied", "hf_class": "Qwen3_5MoeForCausalLM",
        "hf_text_params": sum(p.numel() for p in m.parameters()), "tied": True, "checkpoint_dtype": "F32"})


def make_dense_bf16():
    path = fresh("dense_bf16")
    torch.manual_seed(3)
    text = common_text(num_hidden_layers=4, intermediate_size=80, linear_num_key_heads=2, linear_num_value_heads=6,
                       linear_key_head_dim=16, linear_value_head_dim=16, tie_word_embeddings=False)
    cfg = Qwen3_5TextConfig(**text)
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    model = Qwen3_5ForCausalLM(cfg).float()
    randomise(model, 303)
    model = model.to(torch.bfloat16)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for frac in (0.5, 0.6, 0.7, 0.8):  # shard boundaries fall between tensors: find a size giving 2 shards
        shutil.rmtree(path)
        model.save_pretrained(path, max_shard_size=int(total * frac))
        if len([f for f in os.listdir(path) if f.endswith(".safetensors")]) == 2:
            break
    shards = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], shards

    def legacy_rope(c):
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp["rope_theta"]
        c["partial_rotary_factor"] = 0.5  # rotary dim 16 of hd 32
    edit_config(path, legacy_rope)

    rows = make_sequences(512, 33)
    m = load(Qwen3_5ForCausalLM, path)
    assert m.config.rope_parameters["rope_theta"] == 1000000.0
    assert m.config.rope_parameters["partial_rotary_factor"] == 0.5, m.config.rope_parameters
    assert m.model.embed_tokens.weight.dtype == torch.float32
    golden, _ = run_golden(m, rows)
    write_outputs(path, rows, golden, {
        "model": "dense_bf16", "hf_class": "Qwen3_5ForCausalLM",
        "hf_text_params": sum(p.numel() for p in m.parameters()), "tied": False, "checkpoint_dtype": "BF16",
        "note": "bf16 checkpoint loaded by HF in fp32 (exact upcast); golden is the fp32 forward"})


def make_moe_per_expert():
    path = fresh("moe_per_expert")
    torch.manual_seed(4)
    text = common_text(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], num_experts=4,
                       num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                       tie_word_embeddings=False)
    cfg = Qwen3_5MoeTextConfig(**text)
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    model = Qwen3_5MoeForCausalLM(cfg).float()
    randomise(model, 404)
    model.save_pretrained(path)  # HF 5.23 writes experts per expert (its qwen2_moe conversion, reversed)
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        assert "model.layers.0.mlp.experts.0.gate_proj.weight" in f.keys()
    rows = make_sequences(512, 44)
    per = load(Qwen3_5MoeForCausalLM, path)
    golden, logits = run_golden(per, rows)
    n_params = sum(p.numel() for p in per.parameters())
    # Same weights in the fused layout give the same logits.
    fused_dir = path + "_fused_tmp"
    shutil.rmtree(fused_dir, ignore_errors=True)
    shutil.copytree(path, fused_dir)
    rewrite_safetensors(os.path.join(fused_dir, "model.safetensors"), lambda t: fuse_experts(t, 4))
    fused = load(Qwen3_5MoeForCausalLM, fused_dir)
    shutil.rmtree(fused_dir)
    _, logits_fused = run_golden(fused, rows)
    assert torch.equal(logits, logits_fused), (logits - logits_fused).abs().max()
    # Values of HF's fused expert tensors at random positions: what stacking per-expert weights must give.
    g = torch.Generator().manual_seed(45)
    probes = []
    for li, layer in enumerate(per.model.layers):
        for pname in ("gate_up_proj", "down_proj"):
            t = getattr(layer.mlp.experts, pname).detach()
            for _ in range(16):
                idx = [int(torch.randint(0, d, (1,), generator=g)) for d in t.shape]
                probes.append({"key": f"model.layers.{li}.mlp.experts.{pname}", "index": idx,
                               "value": float(t[tuple(idx)])})
    write_outputs(path, rows, golden, {
        "model": "moe_per_expert", "hf_class": "Qwen3_5MoeForCausalLM (per-expert file == fused)",
        "hf_text_params": n_params, "tied": False, "checkpoint_dtype": "F32", "fused_expert_probes": probes})


def make_moe_vl_quirks():
    path = fresh("moe_vl_quirks")
    torch.manual_seed(5)
    text = common_text(
        num_hidden_layers=3, layer_types=["full_attention", "linear_attention", "linear_attention"],
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=4,
        linear_key_head_dim=32, linear_value_head_dim=8, linear_conv_kernel_dim=2, rms_norm_eps=1e-5,
        hidden_act="swish", num_experts=4, num_experts_per_tok=1, moe_intermediate_size=24,
        shared_expert_intermediate_size=0, hidden_size=32, tie_word_embeddings=True,  # both classes tie
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=32, out_hidden_size=32, patch_size=2,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16, in_channels=3)
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    model = Qwen3_5MoeForConditionalGeneration(cfg).float()
    with torch.no_grad():  # zero-width shared expert: nothing to randomise there (std of in=0 is undefined)
        for layer in model.model.language_model.layers:
            layer.mlp.shared_expert.down_proj.weight.data = torch.zeros(32, 1)
    randomise(model, 505)
    for layer in model.model.language_model.layers:
        layer.mlp.shared_expert.down_proj.weight.data = torch.zeros(32, 0)
    model.save_pretrained(path)
    g = torch.Generator().manual_seed(6)

    def quirks(t):
        with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
            assert f.get_slice("model.language_model.layers.0.mlp.shared_expert.gate_proj.weight").get_shape() == [0, 32]
        t = fuse_experts(t, 4)
        t = {("visual." + k[len("model.visual."):] if k.startswith("model.visual.") else k): v for k, v in t.items()}
        t["mtp.fc.weight"] = torch.randn(32, 64, generator=g)
        t["mtp.layers.0.mlp.experts.gate_up_proj"] = torch.randn(4, 8, 32, generator=g)
        return t
    rewrite_safetensors(os.path.join(path, "model.safetensors"), quirks)

    def rope_scaling(c):
        c["text_config"]["rope_scaling"] = {"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 1.0}
    edit_config(path, rope_scaling)

    rows = make_sequences(512, 55)
    m = load(Qwen3_5MoeForConditionalGeneration, path)
    rp = m.config.text_config.rope_parameters
    assert rp["rope_theta"] == 5000.0 and rp["partial_rotary_factor"] == 1.0, rp
    assert m.lm_head.weight.data_ptr() == m.model.language_model.embed_tokens.weight.data_ptr()
    golden, logits = run_golden(m, rows)
    # The vision tower came back from the top-level visual.* keys (nothing random in the text model).
    mem = dict(model.named_parameters())
    for k, v in m.named_parameters():
        assert torch.equal(v, mem[k]), k
    txt = load(AutoModelForCausalLM, path)
    assert type(txt).__name__ == "Qwen3_5MoeForCausalLM", type(txt)
    _, logits_txt = run_golden(txt, rows)
    assert torch.allclose(logits, logits_txt, atol=1e-5), (logits - logits_txt).abs().max()
    write_outputs(path, rows, golden, {
        "model": "moe_vl_quirks", "hf_class": "Qwen3_5MoeForConditionalGeneration (checked equal to Qwen3_5MoeForCausalLM)",
        "hf_text_params": sum(p.numel() for p in txt.parameters()), "tied": True, "checkpoint_dtype": "F32"})


MAKERS = {"dense_vl": make_dense_vl, "moe_tied": make_moe_tied, "dense_bf16": make_dense_bf16,
          "moe_per_expert": make_moe_per_expert, "moe_vl_quirks": make_moe_vl_quirks}


def main():
    try:
        import fla  # noqa: F401
        sys.exit("flash-linear-attention is installed: goldens must come from HF's torch GDN path")
    except ImportError:
        pass
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or MAKERS:  # names: only those models (default: all)
        MAKERS[name]()
    for name in sorted(d for d in os.listdir(OUT) if os.path.isdir(os.path.join(OUT, d))):
        size = sum(os.path.getsize(os.path.join(OUT, name, f)) for f in os.listdir(os.path.join(OUT, name)))
        print(f"{name}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
