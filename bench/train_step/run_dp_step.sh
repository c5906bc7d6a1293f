#!/usr/bin/env bash
# Data-parallel training step on 1, 2, ... GPUs of this machine: ours (bench_train_step, one process per GPU with
# the torchrun variables) and HF transformers + PEFT + flash-linear-attention + Liger under torchrun DDP, same
# shapes, tokens per GPU and LoRA. Prints a table (tokens/s of all GPUs together, scaling over 1 GPU, ours / HF)
# and the JSON lines.
#
#   bench/train_step/run_dp_step.sh BENCH_BIN [WHEEL_DIR] [SHAPES...]
#   WHEEL_DIR: flash-linear-attention, fla-core, liger-kernel, einops wheels ("" skips HF); SHAPES default
#   "2b 9b". Env TOKENS (4096 per GPU), STEPS (5), GPU_COUNTS ("1 2"; e.g. "1 2 4"), HF=0 skips HF,
#   HF_SHAPES / HF_GPU_COUNTS (default: the same as ours) limit the HF runs.
set -u
BIN=${1:?bench_train_step binary}
WHL=${2:-}
shift 2 2>/dev/null || shift $#
SHAPES=${*:-2b 9b}
TOKENS=${TOKENS:-4096}
STEPS=${STEPS:-5}
COUNTS=${GPU_COUNTS:-1 ${GPUS:-2}}
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=${OUT:-/tmp}/dp_step.jsonl
: > "$LOG"
export NCCL_NVLS_ENABLE=0
HF_OK=0
if [ "${HF:-1}" = 1 ] && [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/dp_site "$WHL"/*.whl \
    && HF_OK=1
fi
ours() {  # shape gpus
  local P=$((29500 + RANDOM % 500)) r
  for r in $(seq 1 $(($2 - 1))); do
    RANK=$r WORLD_SIZE=$2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
      "$BIN" --shape "$1" --tokens "$TOKENS" --steps "$STEPS" --warmup 2 --ckpt 1 ${OURS_ARGS:-} > /dev/null &
  done
  if [ "$2" -gt 1 ]; then
    RANK=0 WORLD_SIZE=$2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
      "$BIN" --shape "$1" --tokens "$TOKENS" --steps "$STEPS" --warmup 2 --ckpt 1 ${OURS_ARGS:-}
  else
    "$BIN" --shape "$1" --tokens "$TOKENS" --steps "$STEPS" --warmup 2 --ckpt 1 ${OURS_ARGS:-}
  fi
  wait
}
for s in $SHAPES; do
  for g in $COUNTS; do
    ours "$s" "$g" | tee /dev/stderr | grep '^{' | sed "s/}\$/,\"gpus_run\":$g}/" >> "$LOG"
  done
  if [ "$HF_OK" = 1 ] && [[ " ${HF_SHAPES:-$SHAPES} " == *" $s "* ]]; then
    for g in ${HF_GPU_COUNTS:-$COUNTS}; do
      PYTHONPATH=/tmp/dp_site PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --nproc_per_node "$g" \
        --master_port $((30000 + RANDOM % 500)) "$HERE/hf_ddp_step.py" --shape "$s" --tokens "$TOKENS" \
        --steps "$STEPS" --fla 1 --liger 1 2> >(grep -v Warning | tail -3 >&2) | grep '^{' >> "$LOG"
    done
  fi
done
python3 - "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["shape"], r["impl"]), {})[r["gpus"]] = r
print(f"{'shape':6} {'impl':26} {'gpus':>4} {'tok/s':>9} {'x 1 GPU':>8} {'peak GiB':>9}   ours / this")
for (shape, impl), d in by.items():
    one = d.get(1)
    for g, r in sorted(d.items()):
        line = f"{shape:6} {impl:26} {g:4d} {r['tokens_per_s']:9.0f} "
        line += f"{r['tokens_per_s'] / one['tokens_per_s']:8.3f} " if one else f"{'':8} "
        line += f"{r['peak_vram_gib']:9.2f}"
        ours = by.get((shape, "deltatune"), {}).get(g)
        if ours and impl != "deltatune":
            line += f"   {ours['tokens_per_s'] / r['tokens_per_s']:6.2f}x"
        print(line)
print(json.dumps({"bench": "dp_step_summary", "rows": rows}))
PY
