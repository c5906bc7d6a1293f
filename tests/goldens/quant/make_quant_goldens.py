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
          computes. `fp8_activations`: HF's own FP8 forward on the GPU (activations quantized per 128-group too),
          its loss and the norm-relative distance of its logits from the dequantized ones, for reference.
  nf4/    bitsandbytes' quantize_4bit(blocksize=64, quant_type="nf4", compress_statistics=True) of every dense
          linear weight of bf16/: nf4_state.safetensors holds per weight `<key>.packed` (uint8, 2 indices a
          byte), `.qabsmax` (uint8), `.absmax2` (f32), `.offset` (f32 [1]) and once `code` (the NF4 codebook)
          and `code2` (the absmax dynamic map). golden_eval.json: HF in fp32 with every such weight replaced by
          bitsandbytes' dequantize_4bit of it.
golden_eval.jsonl (each folder): the sequences of make_checkpoints.py (7, 29, 70 tokens, some labels -100).
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


def main():
    bf16_path, rows = make_bf16()
    make_fp8(bf16_path, rows)
    make_nf4(bf16_path, rows)
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
