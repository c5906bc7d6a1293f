"""Issue 31 (c): the adapter our engine trained on the FP8-quantized base, loaded by PEFT onto the bf16 base.
Prints the assistant-token loss of the first N rows of the dataset with the bf16 base alone and with the
adapter, and whether PEFT reported missing or unexpected adapter keys.
  python3 peft_load_check.py MODEL_DIR ADAPTER_DIR DATA.jsonl [N]
"""
import json, sys, warnings
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import PeftModel

model_dir, adapter_dir, data = sys.argv[1], sys.argv[2], sys.argv[3]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 200
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
rows = [json.loads(l) for l in open(data)][:n]


def loss(m):
    tot, cnt = 0.0, 0
    for r in rows:
        msgs = r["messages"]
        prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(msgs, tokenize=False)
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        ids = tok(full, add_special_tokens=False)["input_ids"]
        labels = [-100] * len(p) + ids[len(p):]
        x = torch.tensor([ids], device="cuda")
        y = torch.tensor([labels], device="cuda")
        with torch.no_grad():
            logits = m(input_ids=x).logits.float()
        lp = torch.nn.functional.cross_entropy(logits[0, :-1], y[0, 1:], ignore_index=-100, reduction="sum")
        tot += float(lp)
        cnt += int((y[0, 1:] != -100).sum())
    return tot / cnt


base = loss(model)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    pm = PeftModel.from_pretrained(model, adapter_dir).cuda().eval()
    key_warnings = [str(x.message)[:300] for x in w if "key" in str(x.message).lower()]
n_lora = sum(1 for name, _ in pm.named_modules() if name.endswith("lora_A"))
adapted = loss(pm)
print(json.dumps(dict(check="peft_on_bf16_base", rows=len(rows), base_loss=round(base, 5), adapter_loss=round(adapted, 5),
                      lora_modules=n_lora, key_warnings=key_warnings)), flush=True)
