#!/usr/bin/env bash
# On a CUDA machine: where the GPU time of a training step goes. Runs bench_train_step under Nsight Compute
# (one metric, gpu__time_duration, no cache flush, clocks as found) and prints the kernels grouped by name:
# calls and milliseconds per step, share of the step, largest first. The raw CSV goes to $OUT (or /tmp).
#   scripts/profile_step.sh BENCH_BIN [bench_train_step options...]   (default: --shape 2b --tokens 4096)
# Kernels run one at a time under ncu, so the sum is the GPU work without overlap or launch gaps.
set -euo pipefail
BIN=${1:?bench_train_step binary}
shift
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--shape 2b --tokens 4096)
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CSV="$OUT/profile_step.csv"
# One warm-up step and one measured step: the table divides by 2 (both steps launch the same kernels).
"$NCU" --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
  "$BIN" "${ARGS[@]}" --steps 1 --warmup 1 >"$CSV" 2>"$OUT/profile_step.err" || {
  tail -20 "$OUT/profile_step.err"
  exit 1
}
python3 "$(dirname "$0")/ncu_table.py" "$CSV" 2
