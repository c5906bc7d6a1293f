"""Tokenizer goldens from Hugging Face `tokenizers`.

  DT_QWEN3_TOKENIZER=.../tokenizer.json python tests/goldens/tokenizer/make_goldens.py [--retrain-tiny]

Each *_ids.jsonl line: {"text": ..., "ids": tokenizer(text, add_special_tokens=False), "decoded": decode(ids)}.
- qwen3_ids.jsonl: the real Qwen3 tokenizer.json (../shared/data/tokenizers/qwen3, 11 MB, not committed).
- qwen3_5_ids.jsonl: Qwen3.5 tokenizer.json built by make_qwen3_5_tokenizer.py (not committed).
- tiny_qwen_ids.jsonl / tiny_gpt2_ids.jsonl: small BPE tokenizers trained here and committed
  (tiny_qwen.json: Qwen3.5 regex + NFC + added tokens with lstrip/rstrip/single_word/normalized flags;
  tiny_gpt2.json: ByteLevel(use_regex, add_prefix_space) with merges written as "a b" strings), so the
  tests exercise every supported structure even where the big files are absent. BPE training breaks ties
  differently from run to run, so the committed tiny files are reused unless --retrain-tiny is given.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from corpus import FIXED, corpus  # noqa: E402

QWEN3 = os.environ.get("DT_QWEN3_TOKENIZER") or sys.exit("set DT_QWEN3_TOKENIZER to Qwen3's tokenizer.json")
QWEN35 = os.path.join(HERE, "qwen3_5", "tokenizer.json")
QWEN35_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

EXTRA_TINY = ["x [MASK] y", "x[MASK]y", "a  <sep>  b", "<sep>", "  <sep>\n\nz", "say hello there", "sayhello",
              "hello, hello!", "_hello", "hello_", "cafe\u0301 au lait", "café", "<R>   tail", "<|im_start|>x<|im_end|>",
              # single_word neighbours are Rust regex \w: marks, ZWJ, connector punctuation and circled letters
              # are word characters, superscript digits and fractions are not.
              "a\u0301hello", "hello\u20d7", "\u200dhello", "hello\u200c", "\u203fhello", "\u24b6hello",
              "\u00b2hello", "hello\u00bd", "\u2163hello", "\U0001f130hello"]


def write(tok, out_name, texts):
    n_ids = 0
    with open(os.path.join(HERE, out_name), "w", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            n_ids += len(ids)
            f.write(json.dumps({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)},
                               ensure_ascii=False) + "\n")
    print(f"{out_name}: {len(texts)} texts, {n_ids} ids")


def train_tiny(pre, vocab_size, added):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(FIXED * 3, trainer=trainer)
    tok.add_tokens(added)
    return tok


def main():
    texts = corpus()
    write(Tokenizer.from_file(QWEN3), "qwen3_ids.jsonl", texts)
    if os.path.exists(QWEN35):
        write(Tokenizer.from_file(QWEN35), "qwen3_5_ids.jsonl", texts)
    else:
        print("skipping Qwen3.5: run make_qwen3_5_tokenizer.py first")

    retrain = "--retrain-tiny" in sys.argv[1:]
    tiny_path = os.path.join(HERE, "tiny_qwen.json")
    if retrain or not os.path.exists(tiny_path):
        qwen_pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tiny = train_tiny(qwen_pre, 700, [
            AddedToken("<|im_start|>", special=True, normalized=False),
            AddedToken("<|im_end|>", special=True, normalized=False),
            AddedToken("[MASK]", special=True, lstrip=True, normalized=False),
            AddedToken("<sep>", special=False, lstrip=True, rstrip=True, normalized=False),
            AddedToken("<R>", special=False, rstrip=True, normalized=False),
            AddedToken("hello", special=False, single_word=True, normalized=False),
            AddedToken("café", special=False, normalized=True)])
        tiny.save(tiny_path)
    write(Tokenizer.from_file(tiny_path), "tiny_qwen_ids.jsonl", texts + EXTRA_TINY)

    path = os.path.join(HERE, "tiny_gpt2.json")
    if retrain or not os.path.exists(path):
        gpt2 = train_tiny(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), 500,
                          [AddedToken("<|endoftext|>", special=True, normalized=False)])
        gpt2.save(path)
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]  # the older "a b" spelling
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
    write(Tokenizer.from_file(path), "tiny_gpt2_ids.jsonl", texts)


if __name__ == "__main__":
    main()
