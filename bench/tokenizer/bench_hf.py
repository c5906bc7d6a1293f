"""HF `tokenizers` speed on the same documents bench_tokenizer uses (called by it; prints one JSON line).

  python bench_hf.py TOKENIZER_JSON DOCS_JSONL
Single thread: Tokenizer.encode per document with RAYON_NUM_THREADS=1 semantics (encode never uses
threads). All cores: encode_batch over all documents (rayon thread pool, one thread per core).
"""
import json
import sys
import time

from tokenizers import Tokenizer


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    docs = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
    tok.encode_batch(docs[:64], add_special_tokens=False)  # warm-up
    t0 = time.perf_counter()
    n1 = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
    t1 = time.perf_counter()
    n2 = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    t2 = time.perf_counter()
    print(json.dumps({"tokens": n1, "single_s": t1 - t0, "batch_tokens": n2, "all_s": t2 - t1}))


if __name__ == "__main__":
    main()
