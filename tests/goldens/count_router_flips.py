# Counts router top-k flips between the fp32 and bf16 forwards of the moe_tied golden with HF on the CPU
# (evidence for the bf16 MoE gradient tolerance in tests/cuda/model_e2e.cpp). Run from the repo root:
#   python3 tests/goldens/count_router_flips.py   -> "424 token-layers, 11 (2.6%) with a different expert set"
import json, torch
from transformers import AutoModelForCausalLM
d = "tests/goldens/models/moe_tied"
seqs = [json.loads(l) for l in open(d + "/golden_eval.jsonl")]
def routes(dtype):
    m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=dtype)
    out = []
    hooks = [mod.register_forward_hook(lambda mod, i, o: out.append(o)) for n, mod in m.named_modules() if n.endswith("mlp.gate")]
    with torch.no_grad():
        for s in seqs:
            m(torch.tensor([s["input_ids"]]))
    return out
a, b = routes(torch.float32), routes(torch.bfloat16)
k = json.load(open(d + "/config.json"))["num_experts_per_tok"]
flips = tot = 0
for x, y in zip(a, b):
    lx = x[0] if isinstance(x, tuple) else x
    ly = y[0] if isinstance(y, tuple) else y
    ix = x[2] if isinstance(x, tuple) and len(x) > 2 else torch.topk(lx.float(), k, -1).indices
    iy = y[2] if isinstance(y, tuple) and len(y) > 2 else torch.topk(ly.float(), k, -1).indices
    for r1, r2 in zip(ix.tolist(), iy.tolist()):
        tot += 1
        flips += set(r1) != set(r2)
print("tokens x layers", tot, "with a different expert set in bf16:", flips, f"({100*flips/tot:.1f}%)")
