"""HF transformers `generate` on the same GPU and shapes as bench_generate: random-weight Qwen3_5ForCausalLM
(bf16, sdpa), --batch prompts of --prompt random tokens, greedy, --new tokens (min = max, so no early stop),
KV/GDN cache on. Time to first token = generate(max_new_tokens=1); decode tokens/s = batch x (new - 1) over
(time of the full generate - time to first token). Median of --runs after a warm-up. Prints one JSON line.

  python3 hf_generate.py --shape 0.8b [--batches 1,8] [--prompt 1024] [--new 64] [--fla 1]

--fla 1: flash-linear-attention (carried wheels) must import; transformers then runs FLA's chunked GDN for the
prefill and its fused recurrent kernel for decode (no causal-conv1d there: the conv runs in PyTorch).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_step"))
from hf_train_step import SHAPES  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="0.8b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fla", type=int, default=1)
    a = ap.parse_args()
    if a.fla:
        import fla  # noqa: F401
    from transformers import Qwen3_5ForCausalLM as Model, Qwen3_5TextConfig as Config

    cfg = Config(vocab_size=248320, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                 linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, **SHAPES[a.shape])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Model(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    for batch in [int(b) for b in a.batches.split(",")]:
        ids = torch.randint(0, cfg.vocab_size, (batch, a.prompt), device="cuda")
        mask = torch.ones_like(ids)

        def gen(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                     do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            assert out.shape[1] == a.prompt + n, out.shape
            return time.perf_counter() - t0

        gen(4)  # warm-up (Triton compiles)
        ttfts, tps = [], []
        for _ in range(a.runs):
            t1 = gen(1)
            tn = gen(a.new)
            ttfts.append(t1)
            tps.append(batch * (a.new - 1) / max(1e-9, tn - t1))
        gdn = "fla" if a.fla else "torch"
        print(json.dumps({"impl": "hf+" + gdn, "shape": a.shape, "batch": batch, "prompt": a.prompt, "new": a.new,
                          "ttft_ms": round(statistics.median(ttfts) * 1e3, 2),
                          "decode_tok_s": round(statistics.median(tps), 1),
                          "device": torch.cuda.get_device_name(0)}), flush=True)

if __name__ == "__main__":
    main()
