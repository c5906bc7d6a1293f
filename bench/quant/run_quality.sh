#!/bin/bash
# Issue 31 quality and PEFT checks on one GPU: a random-weight 0.8B-shaped checkpoint (make_quality_runs.py), the
# same 200-step arithmetic-chat LoRA run with base_quantization none / fp8 / nf4 (final eval_loss compared), then
# the adapter trained on the fp8 base loaded by PEFT onto the bf16 base (peft_load_check.py).
#   bench/quant/run_quality.sh DELTATUNE_BINARY TOKENIZER_DIR WORK_DIR
# TOKENIZER_DIR holds a Qwen tokenizer.json + tokenizer_config.json (vocab <= 248320).
set -eo pipefail
DT=$1 TOK=$2 W=$3
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
python3 "$HERE/make_quality_runs.py" "$W" "$TOK"
for q in none fp8 nf4; do
  (cd "$W" && "$DT" train "run_$q.yaml" --db "$W/runs.db" | tee "$W/train_$q.log" | grep eval_loss)
done
python3 "$HERE/peft_load_check.py" "$W/model" "$W/runs/fp8" "$W/arith.jsonl" 200
