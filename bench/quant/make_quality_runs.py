"""Issue 31 quality check: a random-weight 0.8B-shaped Qwen3.5 checkpoint (transformers, bf16, real vocab/shape),
an arithmetic chat dataset, and one run config per (base_quantization, seed), identical otherwise: several bf16
seeds measure the run-to-run spread the fp8 / nf4 differences are judged against.
  python3 make_quality_runs.py OUT_DIR TOKENIZER_DIR [LR] [QUANT:SEED,...]  (bench/quant/run_quality.sh)
Writes run_QUANT_sSEED.yaml for each run (default: lr 2e-4; none:42,none:43,none:44,fp8:42,nf4:42).
"""
import json, os, random, shutil, sys
import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

out, tok = sys.argv[1], sys.argv[2]
lr = float(sys.argv[3]) if len(sys.argv) > 3 else 2e-4
runs = [r.split(":") for r in (sys.argv[4] if len(sys.argv) > 4 else "none:42,none:43,none:44,fp8:42,nf4:42").split(",")]
m = os.path.join(out, "model")
os.makedirs(m, exist_ok=True)
cfg = Qwen3_5TextConfig(vocab_size=248320, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                        linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, num_hidden_layers=24,
                        hidden_size=1024, num_attention_heads=8, num_key_value_heads=2, intermediate_size=3584,
                        linear_num_value_heads=16, tie_word_embeddings=True, eos_token_id=151645, pad_token_id=151643)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = Qwen3_5ForCausalLM(cfg)
model.save_pretrained(m, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tok, f), m)
rng = random.Random(7)
with open(os.path.join(out, "arith.jsonl"), "w") as f:
    for _ in range(6000):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice(["plus", "minus", "times"])
        c = a + b if op == "plus" else a - b if op == "minus" else a * b
        f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {a} {op} {b}?"},
                                         {"role": "assistant", "content": f"{a} {op} {b} is {c}."}]}) + "\n")
for q, seed in runs:
    with open(os.path.join(out, f"run_{q}_s{seed}.yaml"), "w") as f:
        f.write(f"""base_model: model
datasets:
  - path: arith.jsonl
    type: chat
val_set_size: 0.05
sequence_len: 512
sample_packing: true
adapter: lora
lora_r: 16
lora_alpha: 32
lora_dropout: 0.0
lora_target_groups: [attn, linear_attn, mlp]
micro_batch_size: 4
gradient_accumulation_steps: 1
max_steps: 200
learning_rate: {lr}
lr_scheduler: cosine
warmup_steps: 10
seed: {seed}
backend: cuda
base_quantization: {q}
output_dir: runs/{q}_s{seed}
run_name: arith_{q}_s{seed}
logging_steps: 50
eval_steps: 100
save_steps: 0
""")
print("quality setup done", flush=True)
