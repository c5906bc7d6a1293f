#!/usr/bin/env python3
"""Builds the bundled demo: a tiny Qwen3.5-architecture checkpoint, its tokenizer and a chat dataset.

Run with a Python that has (torch, transformers >= 5.23 with Qwen3_5*, tokenizers, safetensors).
Everything is generated here from a fixed seed: no external data or weights. Output (a few hundred KB):

  resources/demo/model/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
                        generation_config.json}
  resources/demo/data/demo_chat.jsonl
  resources/demo/demo_run.yaml

The dataset has a learnable pattern (capital cities and one-digit sums with a fixed answer template), so a
60-step LoRA run on the CPU backend shows a clearly falling loss.
"""
import json
import os
import random

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "model")
DATA_DIR = os.path.join(HERE, "data")
SEED = 1234

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen-style ChatML without tools or reasoning handling: the demo has plain user/assistant turns.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Greece", "Athens"),
    ("Ireland", "Dublin"), ("Hungary", "Budapest"), ("Japan", "Tokyo"), ("China", "Beijing"),
    ("India", "New Delhi"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Chile", "Santiago"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Cuba", "Havana"),
    ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
    ("Australia", "Canberra"), ("Argentina", "Buenos Aires"),
]
SYSTEM = "You are a concise assistant."
COMMON_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had "
    "by word but not what all were we when your can said there use an each which she do how their if will "
    "up other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long down "
    "day did get come made may part answer question city country capital sum small large model train "
    "over new sound take only little work know place year live me back give most very after thing our just "
    "name good sentence man think say great where help through much before line right too mean old any same "
    "tell boy follow came want show also around form three small set put end does another well large must "
    "big even such because turn here why ask went men read need land different home us move try kind hand "
    "picture again change off play spell air away animal house point page letter mother found study still "
    "learn should world high every near add food between own below plant last school father keep tree never "
    "start earth eye light thought head under story saw left few while along might close something seem "
    "next hard open example begin life always those both paper together got group often run important until "
    "children side feet car mile night walk white sea began grow took river four carry state once book hear "
    "stop without second later miss idea enough eat face watch far really almost let above girl sometimes "
    "mountain cut young talk soon list song being leave family").split()


def make_examples(rng):
    examples = []
    for country, capital in CAPITALS:
        for question in (f"What is the capital of {country}?", f"Name the capital city of {country}."):
            examples.append((question, f"The capital of {country} is {capital}."))
    while len(examples) < 200:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        examples.append((f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."))
    rng.shuffle(examples)
    rows = []
    for i, (q, a) in enumerate(examples):
        messages = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if i % 4 == 0:  # some rows carry a system turn, as real chat data does
            messages.insert(0, {"role": "system", "content": SYSTEM})
        rows.append({"messages": messages})
    return rows


def render(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def train_tokenizer(rows):
    tok = Tokenizer(models.BPE())
    # The same pipeline as the real Qwen3/Qwen3.5 tokenizer.json (NFC, Qwen split regex, byte level
    # without its own regex), so the demo exercises exactly the code path real checkpoints use.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1000, min_frequency=1, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = [render(r["messages"]) for r in rows]
    # Extra plain text so the merges cover words beyond the exact dataset strings.
    corpus += [f"{c} {k} capital city country" for c, k in CAPITALS]
    corpus += [f"What is {a} plus {b}? {a} plus {b} is {a + b}. {a} minus {b} is {a - b}. "
               f"{a} times {b} is {a * b}." for a in range(40) for b in range(40)]
    corpus += [" ".join(w for w in COMMON_WORDS[i:] + COMMON_WORDS[:i]) for i in range(len(COMMON_WORDS))]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def write_tokenizer(tok):
    path = os.path.join(MODEL_DIR, "tokenizer.json")
    tok.save(path)
    with open(path) as f:
        j = json.load(f)
    # Qwen's file spells these as empty strings rather than null.
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    added = {}
    for t in SPECIAL_TOKENS:
        added[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": t not in ("<think>", "</think>")}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(MODEL_DIR, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_model(tok):
    vocab = (tok.get_vocab_size() + 63) // 64 * 64
    # Head sizes are the real Qwen3.5 ones (hd 256, dk = dv = 128) so GPU kernels specialised for them
    # run the demo too; only widths and depth are tiny.
    cfg = Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=256,
        linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        tie_word_embeddings=False, rms_norm_eps=1e-6,
        bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"))
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(MODEL_DIR, safe_serialization=True)
    return model


def write_data(rows):
    os.makedirs(DATA_DIR, exist_ok=True)
    with open(os.path.join(DATA_DIR, "demo_chat.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


DEMO_RUN = """\
# The bundled demo run: a tiny random Qwen3.5 model learns capital cities and one-digit sums.
# Paths are relative to this file. Start it with `deltatune train resources/demo/demo_run.yaml`
# or from the studio (Monitor > Start after loading it on the Train page).
base_model: model
datasets:
  - path: data/demo_chat.jsonl
    type: chat
val_set_size: 0.05
sequence_len: 256
sample_packing: true
adapter: lora
lora_r: 8
lora_alpha: 16
lora_dropout: 0.0
lora_target_groups: [attn, linear_attn, mlp]
micro_batch_size: 2
gradient_accumulation_steps: 1
max_steps: 60
learning_rate: 0.003
lr_scheduler: cosine
warmup_steps: 5
seed: 42
backend: auto
fused_loss: true
gradient_checkpointing: false
output_dir: runs/demo
run_name: demo
logging_steps: 1
eval_steps: 20
save_steps: 20
"""


def main():
    os.makedirs(MODEL_DIR, exist_ok=True)
    rng = random.Random(SEED)
    rows = make_examples(rng)
    tok = train_tokenizer(rows)
    write_tokenizer(tok)
    model = write_model(tok)
    write_data(rows)
    with open(os.path.join(HERE, "demo_run.yaml"), "w") as f:
        f.write(DEMO_RUN)
    n = sum(p.numel() for p in model.parameters())
    size = os.path.getsize(os.path.join(MODEL_DIR, "model.safetensors"))
    print(f"vocab {tok.get_vocab_size()} -> {model.config.vocab_size}, params {n}, "
          f"model.safetensors {size} bytes, {len(rows)} examples")


if __name__ == "__main__":
    main()
