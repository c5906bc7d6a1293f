#!/bin/bash
# Issue 31 quality and PEFT checks on one GPU: a random-weight 0.8B-shaped checkpoint (make_quality_runs.py), the
# same 200-step arithmetic-chat LoRA run with bf16 over several seeds (the spread) and with fp8 / nf4 bases
# (final eval_loss compared by quality_summary.py), then the adapter trained on the fp8 base loaded by PEFT onto
# the bf16 base (peft_load_check.py).
#   bench/quant/run_quality.sh DELTATUNE_BINARY TOKENIZER_DIR WORK_DIR [LR] [QUANT:SEED,...]
# TOKENIZER_DIR holds a Qwen tokenizer.json + tokenizer_config.json (vocab <= 248320).
set -eo pipefail
DT=$1 TOK=$2 W=$3 LR=${4:-2e-4} RUNS=${5:-none:42,none:43,none:44,fp8:42,nf4:42}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
python3 "$HERE/make_quality_runs.py" "$W" "$TOK" "$LR" "$RUNS"
for r in ${RUNS//,/ }; do
  q=${r%%:*} s=${r##*:}
  (cd "$W" && "$DT" train "run_${q}_s$s.yaml" --db "$W/runs.db" | tee "$W/train_${q}_s$s.log" | grep eval_loss)
done
python3 "$HERE/quality_summary.py" "$W"
A=$(dirname "$(find "$W/runs" -path '*fp8*' -name adapter_config.json | head -1)")
python3 "$HERE/peft_load_check.py" "$W/model" "$A" "$W/arith.jsonl" 200
