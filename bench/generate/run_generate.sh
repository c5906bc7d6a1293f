#!/usr/bin/env bash
# Our generation vs HF transformers generate (+ flash-linear-attention when wheels are given) on the same GPU,
# same shapes, batch 1 and 8, a 1,024-token prompt: time to first token, decode tokens/s and the ratios.
#
#   bench/generate/run_generate.sh BENCH_BIN [WHEEL_DIR] [SHAPES...]
#   WHEEL_DIR: flash-linear-attention, fla-core, einops wheels ("" = HF with its PyTorch GDN path).
#   Env PROMPT (1024), NEW (128 ours), HF_NEW (64), RUNS (3), BATCHES ("1,8"), OURS_ARGS (e.g. "--graphs 0").
set -u
BIN=${1:?bench_generate binary}
WHL=${2:-}
shift 2 2>/dev/null || shift $#
SHAPES=${*:-0.8b 2b 9b}
PROMPT=${PROMPT:-1024}
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=${OUT:-/tmp}/generate.jsonl
: > "$LOG"
FLA=0
if [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fla_site "$WHL"/*.whl \
    && export PYTHONPATH=/tmp/fla_site${PYTHONPATH:+:$PYTHONPATH} && FLA=1
fi
BATCHES=${BATCHES:-1,8}
for s in $SHAPES; do
  "$BIN" --shape "$s" --batches "$BATCHES" --prompt "$PROMPT" --new "${NEW:-128}" --runs "${RUNS:-3}" ${OURS_ARGS:-} \
    | tee /dev/stderr | grep '^{' >> "$LOG"
  PYTHONUNBUFFERED=1 python3 "$HERE/hf_generate.py" --shape "$s" --batches "$BATCHES" --prompt "$PROMPT" \
    --new "${HF_NEW:-64}" --runs "${RUNS:-3}" --fla "$FLA" 2> >(tail -3 >&2) | grep '^{' | tee /dev/stderr >> "$LOG"
done
python3 - "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["shape"], r["batch"]), {})[r["impl"].split("+")[0]] = r
print("\n| shape | batch | ours TTFT ms | HF TTFT ms | ours decode tok/s | HF decode tok/s | decode ratio |")
print("|---|---|---|---|---|---|---|")
for (s, b), d in by.items():
    o, h = d.get("deltatune"), d.get("hf")
    if not o or not h:
        continue
    print(f"| {s} | {b} | {o['ttft_ms']:.1f} | {h['ttft_ms']:.1f} | {o['decode_tok_s']:.1f} | {h['decode_tok_s']:.1f} "
          f"| {o['decode_tok_s'] / h['decode_tok_s']:.2f}x |")
PY
