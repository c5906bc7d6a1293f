# flash-linear-attention's chunk_gated_delta_rule at the same shapes as bench_gdn (packed rows of
# sequences of --seq tokens, cu_seqlens, L2 norm of q and k inside the kernel as HF's Qwen3.5 calls it).
# q and k are repeated to the value heads before timing (HF does the repeat itself when HV > HK; leaving it
# out of the timed region favours FLA). Prints one JSON line per size, same fields as bench_gdn.
import argparse, json, time

import torch

try:  # FLA 0.5.x refuses its GDN backward on Hopper with Triton < 3.7.1 (FACTS.md); lifted for timing only
    import fla.ops.common.chunk_o as _co
    if hasattr(_co, "TRITON_ABOVE_3_7_1"):
        _co.TRITON_ABOVE_3_7_1 = True
except Exception:
    pass
from fla.ops.gated_delta_rule import chunk_gated_delta_rule

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", default="4096,8192,16384,32768")
ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--hk", type=int, default=16)
ap.add_argument("--hv", type=int, default=32)
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--profile", action="store_true", help="also print FLA's GPU kernel time per fwd+bwd (torch.profiler)")
a = ap.parse_args()
dk = dv = 128
dev = "cuda"
torch.manual_seed(1)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, (time.perf_counter() - t0) * 1e3


for T in [int(x) for x in a.tokens.split(",")]:
    cu = list(range(0, T, a.seq)) + [T]
    cu_t = torch.tensor(cu, dtype=torch.long, device=dev)
    q0 = torch.empty(1, T, a.hk, dk, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    k0 = torch.empty(1, T, a.hk, dk, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    r = a.hv // a.hk
    q = q0.repeat_interleave(r, dim=2).detach().requires_grad_()
    k = k0.repeat_interleave(r, dim=2).detach().requires_grad_()
    v = torch.empty(1, T, a.hv, dv, device=dev, dtype=torch.bfloat16).uniform_(-1, 1).requires_grad_()
    g = torch.empty(1, T, a.hv, device=dev, dtype=torch.float32).uniform_(-0.5, 0).requires_grad_()
    beta = torch.empty(1, T, a.hv, device=dev, dtype=torch.bfloat16).uniform_(0.1, 0.9).requires_grad_()
    do = torch.empty(1, T, a.hv, dv, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    scale = dk ** -0.5

    def fwd():
        return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, cu_seqlens=cu_t, use_qk_l2norm_in_kernel=True)[0]

    fw, fb, saved = [], [], 0
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for it in range(a.iters + 2):
        for t in (q, k, v, g, beta):
            t.grad = None
        o, tf = timed(fwd)
        # what autograd keeps for the backward: allocated after the forward, less the output
        saved = max(saved, torch.cuda.memory_allocated() - base - o.numel() * o.element_size())
        _, tb = timed(lambda: o.backward(do))
        if it >= 2:
            fw.append(tf)
            fb.append(tf + tb)
        del o
    peak = torch.cuda.max_memory_allocated() - base
    if a.profile:  # GPU time of one fwd+bwd by kernel: does the wall time above wait on the GPU or on Python?
        from torch.profiler import ProfilerActivity, profile
        for t in (q, k, v, g, beta):
            t.grad = None
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fwd().backward(do)
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or "cuda" in str(e.device_type).lower()]
        tot = sum(e.self_device_time_total for e in ev) / 1e3
        for e in sorted(ev, key=lambda e: -e.self_device_time_total)[:25]:
            print(f"  fla {T:6d} {e.key[:60]:60} {e.count:3d} {e.self_device_time_total / 1e3:8.3f} ms", flush=True)
        print(f"  fla {T:6d} GPU kernel sum per fwd+bwd {tot:.3f} ms", flush=True)
    mf, mb = sorted(fw)[len(fw) // 2], sorted(fb)[len(fb) // 2]
    per = 4.0 * dk * dv + 2.0 * 64 * (dk + dv) + 2.0 * 64 * dk
    ffl = per * T * a.hv
    print(json.dumps({"bench": "gdn", "impl": "fla", "tokens": T, "seq": a.seq, "hk": a.hk, "hv": a.hv,
                      "fwd_ms": mf, "fwd_bwd_ms": mb, "fwd_tflops": ffl / mf * 1e-9,
                      "fwd_bwd_tflops": 3 * ffl / mb * 1e-9, "peak_mib": peak / 2**20,
                      "saved_mib": saved / 2**20}), flush=True)
