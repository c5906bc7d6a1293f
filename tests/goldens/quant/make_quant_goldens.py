#!/usr/bin/env python3
"""Quantized-base goldens: one tiny Qwen3.5 dense checkpoint, quantized by Hugging Face's own tools.

Needs a CUDA GPU (transformers' fine-grained FP8 quantizer and bitsandbytes' 4-bit kernels run there), torch,
transformers (5.17 used), safetensors and bitsandbytes (0.50.2 used). Writes next to this file:

  bf16/   the checkpoint (Qwen3_5ForCausalLM, BF16, H 128, 4 layers [lin, lin, lin, full], nH 2 x hd 128, nKV 1,
          HK = HV = 2 of dk = dv = 64, I 256, vocab 512): every dense linear input size a multiple of 128, as
          transformers' FP8 activation quantization requires.
  fp8/    the same model quantized by transformers (FineGrainedFP8Config(weight_block_size=(128, 128))) and
          saved by save_pretrained: config.json quantization_config, F8_E4M3 weights + weight_scale_inv. This is
          the format of official FP8 checkpoints, and what the engine must load as it is.
          golden_eval.json: `loss`/`logits_first` of HF in fp32 with the FP8 weights dequantized by transformers
          (from_pretrained with FineGrainedFP8Config(dequantize=True)): what a weight-only dequantizing engine
          computes. `fp8_activations`: HF's own FP8 forward on the GPU, where every FP8Linear quantizes its input
          to e4m3 per row and 128 columns (scale amax/448) and multiplies in FP8: what an engine with FP8 GEMMs
          computes (--fp8-activations below).
  nf4/    bitsandbytes' quantize_4bit(blocksize=64, quant_type="nf4", compress_statistics=True) of every dense
          linear weight of bf16/: nf4_state.safetensors holds per weight `<key>.packed` (uint8, 2 indices a
          byte), `.qabsmax` (uint8), `.absmax2` (f32), `.offset` (f32 [1]) and once `code` (the NF4 codebook)
          and `code2` (the absmax dynamic map). golden_eval.json: HF in fp32 with every such weight replaced by
          bitsandbytes' dequantize_4bit of it.
golden_eval.jsonl (each folder): the sequences of make_checkpoints.py (7, 29, 70 tokens, some labels -100).

  python3 make_quant_goldens.py --fp8-activations KERNEL_DIR

only (re)writes fp8/golden_eval.json's `fp8_activations` (the checkpoint and the other goldens stay as they are).
transformers (5.17) runs FP8Linear through the Hub kernel `kernels-community/finegrained-fp8`, fetched by the
`kernels` package; where neither the Hub nor `kernels` can be reached (the GPU machine), KERNEL_DIR is that
kernel's source folder `finegrained-fp8/torch-ext/finegrained_fp8` of a huggingface/kernels-community checkout
(40d4194 used): it is imported as a package (with the `_ops` module its builder generates) and handed to
transformers as the loaded kernel, so the forward is transformers' FP8Linear with the Hub kernel's Triton code.
Written: `loss`, `count`, `per_sequence`, `logits_first` of that forward with the model in fp32 (the FP8 GEMM
takes fp32 activations; the rest is fp32 as the dequantized golden), `bf16` the same with the model in bf16
(loss, and the logits' norm-relative distance from the fp32 ones), and `logits_first_norm_rel_vs_dequantized`.
"""
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from make_checkpoints import load, make_sequences, randomise, run_golden, write_outputs  # noqa: E402

import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import FineGrainedFP8Config, Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
           "out_proj", "gate_proj", "up_proj", "down_proj")


def is_dense_linear(key):
    return key.endswith(".weight") and key.split(".")[-2] in LINEARS and ".layers." in key


def fresh(name):
    path = os.path.join(HERE, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def make_bf16():
    path = fresh("bf16")
    torch.manual_seed(31)
    cfg = Qwen3_5TextConfig(
        vocab_size=512, hidden_size=128, num_hidden_layers=4, intermediate_size=256, num_attention_heads=2,
        num_key_value_heads=1, head_dim=128, linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False, eos_token_id=1, pad_token_id=0,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [8, 4, 4], "mrope_interleaved": True})
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    model = Qwen3_5ForCausalLM(cfg).float()
    randomise(model, 3131)
    model.to(torch.bfloat16).save_pretrained(path)
    rows = make_sequences(cfg.vocab_size, 17)
    golden, _ = run_golden(load(Qwen3_5ForCausalLM, path), rows)
    write_outputs(path, rows, golden, {})
    return path, rows


def norm_rel(a, b):
    return float((a - b).norm() / b.norm())


def make_fp8(bf16_path, rows):
    path = fresh("fp8")
    q = Qwen3_5ForCausalLM.from_pretrained(bf16_path, dtype=torch.bfloat16, device_map="cuda",
                                           quantization_config=FineGrainedFP8Config(weight_block_size=(128, 128)))
    q.save_pretrained(path)
    # HF's own FP8 forward (activations quantized too), for reference.
    fp8_golden, fp8_logits = {}, None
    try:  # needs the `kernels` package (transformers' FP8 GEMM); recorded when it is missing
        with torch.no_grad():
            ids = torch.tensor([rows[0]["input_ids"]], device="cuda")
            fp8_logits = q(input_ids=ids).logits[0].float().cpu()
    except Exception as e:  # noqa: BLE001
        fp8_golden["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    del q
    torch.cuda.empty_cache()
    deq = Qwen3_5ForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                             quantization_config=FineGrainedFP8Config(dequantize=True))
    deq = deq.float().cpu()
    golden, logits = run_golden(deq, rows)
    if fp8_logits is not None:
        fp8_golden["logits_first_norm_rel_vs_dequantized"] = norm_rel(fp8_logits, logits)
    st = {}
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for k in f.keys():
            st[k] = str(f.get_slice(k).get_dtype())
    write_outputs(path, rows, golden, {"fp8_activations": fp8_golden, "stored_dtypes": st})


def make_nf4(bf16_path, rows):
    import bitsandbytes
    import bitsandbytes.functional as bnbf

    path = fresh("nf4")
    with safe_open(os.path.join(bf16_path, "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    state, deq = {}, {}
    for k, w in tensors.items():
        if not is_dense_linear(k):
            continue
        packed, s = bnbf.quantize_4bit(w.cuda(), blocksize=64, quant_type="nf4", compress_statistics=True)
        assert s.nested and s.state2.blocksize == 256, (k, s.nested)
        state[k + ".packed"] = packed.flatten().cpu().contiguous()
        state[k + ".qabsmax"] = s.absmax.cpu().contiguous()
        state[k + ".absmax2"] = s.state2.absmax.float().cpu().contiguous()
        state[k + ".offset"] = s.offset.reshape(1).float().cpu()
        state["code"] = s.code.float().cpu()
        state["code2"] = s.state2.code.float().cpu()
        deq[k] = bnbf.dequantize_4bit(packed, s, quant_type="nf4").float().cpu()
    save_file(state, os.path.join(path, "nf4_state.safetensors"))
    model = load(Qwen3_5ForCausalLM, bf16_path)
    sd = model.state_dict()
    with torch.no_grad():
        for k, v in deq.items():
            sd[k].copy_(v)
    golden, _ = run_golden(model, rows)
    write_outputs(path, rows, golden, {"bitsandbytes_version": bitsandbytes.__version__})


def load_kernel_source(kernel_dir):
    """The kernels-community finegrained-fp8 kernel from its source folder, as the `kernels` package would load it
    from the Hub: a package `finegrained_fp8` with the `_ops` module kernel-builder generates (the torch.library
    namespace its triton_op functions register under). Only its 2-D matmul is needed (a dense model); its
    autotuning grid is cut to one configuration (the tile is the checkpoint's 128x128 block either way; the grid
    only varies warps and pipeline stages, so the compile stays short)."""
    import importlib
    import tempfile
    import textwrap
    import triton

    pkg = os.path.join(tempfile.mkdtemp(), "finegrained_fp8")
    shutil.copytree(kernel_dir, pkg)
    with open(os.path.join(pkg, "_ops.py"), "w") as f:
        f.write(textwrap.dedent("""
            import torch
            NAMESPACE = "_finegrained_fp8_source"
            ops = getattr(torch.ops, NAMESPACE)
            def add_op_namespace_prefix(name):
                return NAMESPACE + "::" + name
            """))
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write("")
    sys.path.insert(0, os.path.dirname(pkg))
    utils = importlib.import_module("finegrained_fp8.utils")
    full = utils.get_accelerator_autotuning_configs

    def one_config(**kw):
        cfgs = full(**kw)
        return [c for c in cfgs if c.num_warps == 4 and c.num_stages == 3][:1] or cfgs[:1]

    utils.get_accelerator_autotuning_configs = one_config
    try:
        importlib.import_module("finegrained_fp8.bayesian_autotuner")
    except ImportError as e:  # its Triton internals differ by version; only the MX kernels use it
        print("note: finegrained_fp8.bayesian_autotuner not importable here (", e, "): plain triton.autotune instead")
        stub = type(sys)("finegrained_fp8.bayesian_autotuner")
        stub.bayesian_autotune = lambda configs, key, **kw: triton.autotune(configs=configs, key=key)
        sys.modules["finegrained_fp8.bayesian_autotuner"] = stub
    matmul = importlib.import_module("finegrained_fp8.matmul")
    return matmul.matmul_2d


def hf_fp8_forward(fp8_path, rows, dtype):
    """transformers' own FP8 model of fp8_path on the GPU (FP8Linear: activations quantized per row and 128
    columns, FP8 products) in `dtype`: run_golden's outputs (per-sequence CE sums, logits of the first)."""
    q, info = Qwen3_5ForCausalLM.from_pretrained(fp8_path, dtype=dtype, device_map="cuda", attn_implementation="eager",
                                                 output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    fp8_linears = [n for n, m in q.named_modules() if type(m).__name__ == "FP8Linear"]
    with safe_open(os.path.join(fp8_path, "model.safetensors"), "pt") as f:
        fp8_weights = [k for k in f.keys() if str(f.get_slice(k).get_dtype()) == "F8_E4M3"]
    assert len(fp8_linears) == len(fp8_weights), (fp8_linears, fp8_weights)
    q.eval()
    out = {"per_sequence": []}
    total, count = 0.0, 0
    with torch.no_grad():
        for i, r in enumerate(rows):
            ids = torch.tensor([r["input_ids"]], device="cuda")
            labels = torch.tensor(r["labels"], device="cuda")
            logits = q(input_ids=ids).logits[0].float()
            tgt = labels[1:]
            s = F.cross_entropy(logits[:-1], tgt, ignore_index=-100, reduction="sum").item()
            c = int((tgt != -100).sum())
            out["per_sequence"].append({"length": len(r["input_ids"]), "loss_sum": s, "count": c})
            total += s
            count += c
            if i == 0:
                out["logits_first"] = logits.cpu().tolist()
    out["loss"] = total / count
    out["count"] = count
    out["fp8_linear_modules"] = len(fp8_linears)
    return out


def add_fp8_activations(kernel_dir):
    import transformers.integrations.finegrained_fp8 as tf_fp8

    os.environ["TRANSFORMERS_DISABLE_DEEPGEMM_LINEAR"] = "1"  # the Triton kernel, whatever else is installed
    matmul_2d = load_kernel_source(kernel_dir)
    tf_fp8._FINEGRAINED_FP8 = tf_fp8.FineGrainedFP8(matmul=matmul_2d, batched_matmul=None, grouped_matmul=None)
    path = os.path.join(HERE, "fp8")
    with open(os.path.join(path, "golden_eval.json")) as f:
        golden = json.load(f)
    rows = [json.loads(line) for line in open(os.path.join(path, "golden_eval.jsonl"))]
    act = hf_fp8_forward(path, rows, torch.float32)
    deq = torch.tensor(golden["logits_first"])
    act["logits_first_norm_rel_vs_dequantized"] = norm_rel(torch.tensor(act["logits_first"]), deq)
    act["kernel"] = "kernels-community/finegrained-fp8 (source, torch-ext/finegrained_fp8), matmul_2d"
    act["transformers_version"] = transformers.__version__
    golden["fp8_activations"] = act
    write_json(path, golden)  # the fp32 golden first: the bf16 pass below only adds to it
    print("fp8_activations fp32: loss %.7f (dequantized %.7f), logits norm-rel vs dequantized %.3e" %
          (act["loss"], golden["loss"], act["logits_first_norm_rel_vs_dequantized"]))
    b = hf_fp8_forward(path, rows, torch.bfloat16)
    act["bf16"] = {"loss": b["loss"],
                   "logits_first_norm_rel_vs_fp32": norm_rel(torch.tensor(b["logits_first"]),
                                                             torch.tensor(act["logits_first"])),
                   "logits_first_norm_rel_vs_dequantized": norm_rel(torch.tensor(b["logits_first"]), deq)}
    write_json(path, golden)
    print("fp8_activations bf16:", act["bf16"])


def write_json(path, golden):
    with open(os.path.join(path, "golden_eval.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fp8-activations":
        add_fp8_activations(sys.argv[2])
        return
    bf16_path, rows = make_bf16()
    make_fp8(bf16_path, rows)
    make_nf4(bf16_path, rows)
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
