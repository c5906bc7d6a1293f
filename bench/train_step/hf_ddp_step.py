"""HF transformers + PEFT (+ flash-linear-attention, + Liger) training step under torchrun DDP: the baseline of
our data-parallel step (bench_train_step under RANK/WORLD_SIZE). Same model, LoRA and row as hf_train_step.py;
each GPU trains its own row of --tokens random ids, DDP all-reduces the fp32 LoRA gradients (its buckets overlap
the backward). Rank 0 prints one JSON line: tokens/s of all GPUs together (GPUs x tokens / median step).

  torchrun --nproc_per_node 2 hf_ddp_step.py --shape 2b --tokens 4096 [--fla 1] [--liger 1]

--fla 1: flash-linear-attention's GDN kernels (its Hopper backward guard lifted in memory, timing only: see
FACTS.md); --liger 1: Liger's fused linear cross-entropy, RMSNorm and SwiGLU, applied before the model is built.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_train_step import SHAPES, import_fla, lora_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2b")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--fla", type=int, default=1)
    ap.add_argument("--liger", type=int, default=1)
    ap.add_argument("--experts", type=int, default=1, help="MoE shapes: LoRA on the experts (target_parameters)")
    a = ap.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.fla:
        import_fla()
    model, cfg = lora_model(a.shape, 0, a.liger, a.experts)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    params = [p for p in ddp.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    g = torch.Generator(device="cuda").manual_seed(11 + rank)
    ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), device="cuda", generator=g)
    times, loss = [], None
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = ddp(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        loss = float(out.loss.detach())
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30
    if rank == 0:
        impl = "hf_peft" + ("_fla" if a.fla else "") + ("_liger" if a.liger else "") + "_ddp"
        print(json.dumps(dict(bench="train_step", impl=impl, shape=a.shape, gpus=world, tokens=a.tokens,
                              step_ms=round(med * 1e3, 2), tokens_per_s=round(a.tokens * world / med, 1),
                              peak_vram_gib=round(peak, 3), loss=round(loss, 5),
                              device=torch.cuda.get_device_name())), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
