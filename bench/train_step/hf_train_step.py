"""HF transformers + PEFT training step on the same GPU, same shapes as bench_train_step: random-weight
Qwen3_5ForCausalLM (bf16), one row of --tokens random ids, LoRA r=16 (alpha 32) on every linear module,
gradient checkpointing, sdpa, batch 1, AdamW. Prints one JSON line (tokens/s, peak VRAM, which GDN path ran).

  python3 hf_train_step.py --shape 2b --tokens 4096 [--fla 1] [--liger 1]

--fla 1 needs flash-linear-attention importable (carried wheels); run --fla 0 where it is not importable. FLA 0.5.x refuses its gated GDN
backward on Hopper with Triton < 3.7.1 (FACTS.md); we lift that guard in memory for a speed anchor only,
so its gradients are untrusted. --liger 1 applies liger-kernel's Qwen3.5 patches (fused linear cross entropy,
RMSNorm, SwiGLU) before the model is built (FACTS.md, "Checked 2026-11-28": the strongest HF stack).
"""
import argparse
import faulthandler
import json
import signal
import statistics
import sys
import time

import torch

SHAPES = {
    "0.8b": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=8, num_key_value_heads=2,
                 intermediate_size=3584, linear_num_value_heads=16, tie_word_embeddings=True),
    "2b": dict(num_hidden_layers=24, hidden_size=2048, num_attention_heads=8, num_key_value_heads=2,
               intermediate_size=6144, linear_num_value_heads=16, tie_word_embeddings=True),
    "4b": dict(num_hidden_layers=32, hidden_size=2560, num_attention_heads=16, num_key_value_heads=4,
               intermediate_size=9216, linear_num_value_heads=32, tie_word_embeddings=True),
    "9b": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=16, num_key_value_heads=4,
               intermediate_size=12288, linear_num_value_heads=32, tie_word_embeddings=False),
    "27b": dict(num_hidden_layers=64, hidden_size=5120, num_attention_heads=24, num_key_value_heads=4,
                intermediate_size=17408, linear_num_value_heads=48, tie_word_embeddings=False),
    # MoE (every layer sparse + shared expert); --layers N runs fewer layers of it.
    "35b-a3b": dict(num_hidden_layers=40, hidden_size=2048, num_attention_heads=16, num_key_value_heads=2,
                    linear_num_value_heads=32, tie_word_embeddings=False, num_experts=256, num_experts_per_tok=8,
                    moe_intermediate_size=512, shared_expert_intermediate_size=512),
}
MOE_PARAMS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b",
           "out_proj", "gate_proj", "up_proj", "down_proj"]


def random_model(shape_name, layers=0, liger=False, device="cuda"):
    """The random-weight bf16 Qwen3.5 model of a SHAPES entry (sdpa attention) and its config; liger: Liger's
    Qwen3.5 patches applied before the model is built (fails loudly when the wheel is missing)."""
    shape = dict(SHAPES[shape_name])
    if layers:
        shape["num_hidden_layers"] = layers
    if "num_experts" in shape:
        from transformers import Qwen3_5MoeForCausalLM as Model, Qwen3_5MoeTextConfig as Config
    else:
        from transformers import Qwen3_5ForCausalLM as Model, Qwen3_5TextConfig as Config
    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3_5, apply_liger_kernel_to_qwen3_5_moe
        (apply_liger_kernel_to_qwen3_5_moe if "num_experts" in shape else apply_liger_kernel_to_qwen3_5)()
    cfg = Config(vocab_size=248320, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                 linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, **shape)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = Model(cfg)
    torch.set_default_dtype(torch.float32)
    return model, cfg


def to_bnb4(model):
    """The decoder's linear layers as bitsandbytes Linear4bit (nf4, double quant, bf16 compute): what
    from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)) builds. Quantized one module at
    a time on the GPU where the weight already is (no host round trip), so the bf16 copy never exists twice."""
    import bitsandbytes as bnb
    for layer in model.model.layers:
        for name, mod in list(layer.named_modules()):
            if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in TARGETS:
                q = bnb.nn.Linear4bit(mod.in_features, mod.out_features, bias=False, compute_dtype=torch.bfloat16,
                                      compress_statistics=True, quant_type="nf4", device="meta")
                q.weight = bnb.nn.Params4bit(mod.weight.data, requires_grad=False, compress_statistics=True,
                                             quant_type="nf4")
                parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                setattr(parent, name.split(".")[-1], q)
                del mod
                q.cuda()
    torch.cuda.empty_cache()
    return model


def lora_model(shape_name, layers=0, liger=False, experts=True, bnb4=False, ckpt=True):
    """random_model with gradient checkpointing (unless not ckpt) and PEFT LoRA r=16 (alpha 32) on every linear module (and the MoE
    experts' parameters when experts), LoRA weights in fp32 as ours keeps them; bnb4: QLoRA base (to_bnb4)."""
    from peft import LoraConfig, get_peft_model
    model, cfg = random_model(shape_name, layers, liger)
    if bnb4:
        model = to_bnb4(model)
    model.config.use_cache = False
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    extra = dict(target_parameters=MOE_PARAMS) if "num_experts" in SHAPES[shape_name] and experts else {}
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, lora_dropout=0.0, **extra))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # fp32 LoRA master weights, as ours
    return model, cfg


def import_fla():
    """flash-linear-attention for the GDN layers (fails loudly when the wheels are missing), with FLA 0.6.0's
    Triton version guard lifted where the installed Triton is newer than it knows."""
    import fla  # noqa: F401
    try:
        import fla.ops.common.chunk_o as co
        if hasattr(co, "TRITON_ABOVE_3_7_1"):
            co.TRITON_ABOVE_3_7_1 = True
    except Exception as e:  # pragma: no cover - depends on the FLA version
        print("note: could not lift the FLA Triton guard:", e, file=sys.stderr)



def run_context():
    """What the HF rate depends on besides the GPU (its step is host-bound Python): package versions, the host's
    CPU model, cores and load. Printed with the result so that runs of different calls can be compared."""
    import importlib.metadata as md
    import os
    versions = {}
    for name in ("torch", "transformers", "peft", "triton", "flash-linear-attention", "fla-core", "liger-kernel"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return dict(versions=versions, host_cpu=cpu, host_cores=os.cpu_count(), host_load=round(os.getloadavg()[0], 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2b")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--fla", type=int, default=0)
    ap.add_argument("--liger", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--experts", type=int, default=1, help="LoRA on MoE experts via target_parameters")
    ap.add_argument("--ckpt", type=int, default=1, help="0: no gradient checkpointing (HF's fastest, most memory)")
    ap.add_argument("--bnb4", type=int, default=0,
                    help="QLoRA: the decoder's linear layers as bitsandbytes Linear4bit (nf4, double quant, bf16 compute)")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # `timeout -s USR1` shows where a run that ran out of time was

    gdn_path = "torch"
    if a.fla:
        import_fla()
    t_start = time.perf_counter()
    model, cfg = lora_model(a.shape, a.layers, a.liger, a.experts, a.bnb4, bool(a.ckpt))
    print(f"model ready after {time.perf_counter() - t_start:.1f} s", file=sys.stderr, flush=True)
    if a.bnb4:
        torch.cuda.reset_peak_memory_stats()  # the bf16 model existed before to_bnb4; HF's loader never holds it
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), device="cuda")
    times = []
    loss = None
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        if s == 0:
            torch.cuda.synchronize()
            print(f"first forward ended {time.strftime('%H:%M:%S')} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr,
                  flush=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        print(f"step {s} ended {time.strftime('%H:%M:%S')} ({time.perf_counter() - t0:.2f} s)", file=sys.stderr,
              flush=True)
        loss = float(out.loss.detach())
    med = statistics.median(times)
    mods = [k for k in sys.modules if k.startswith("fla.ops.gated_delta_rule")]
    if a.fla and mods:
        gdn_path = "fla"
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps(dict(bench="train_step", impl="hf_peft" + ("_bnb4" if a.bnb4 else "") + ("_fla" if a.fla else "") + ("_liger" if a.liger else ""), shape=a.shape,
                          layers=cfg.num_hidden_layers, ckpt=a.ckpt,
                          tokens=a.tokens, step_ms=round(med * 1e3, 2), tokens_per_s=round(a.tokens / med, 1),
                          step_ms_min=round(min(times) * 1e3, 2), step_ms_max=round(max(times) * 1e3, 2),
                          peak_vram_gib=round(peak, 3), loss=round(loss, 5), gdn_path=gdn_path,
                          device=torch.cuda.get_device_name(), **run_context())), flush=True)


if __name__ == "__main__":
    main()
