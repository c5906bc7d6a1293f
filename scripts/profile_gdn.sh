#!/usr/bin/env bash
# On a CUDA machine: where the GPU time of our GDN core goes. Runs bench_gdn under Nsight Compute (one metric,
# gpu__time_duration, no cache flush) for one size and prints the kernels grouped by name: calls and ms per
# forward+backward, largest first.
#   scripts/profile_gdn.sh BENCH_GDN_BIN [--tokens 8192 --keep 0|1 ...]
set -euo pipefail
BIN=${1:?bench_gdn binary}
shift
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--tokens 8192)
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CSV="$OUT/profile_gdn.csv"
# bench_gdn runs 2 warm-up iterations and --iters measured ones: 3 fwd+bwd in all.
"$NCU" --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
  "$BIN" "${ARGS[@]}" --iters 1 >"$CSV" 2>"$OUT/profile_gdn.err" || {
  tail -20 "$OUT/profile_gdn.err"
  exit 1
}
python3 "$(dirname "$0")/ncu_table.py" "$CSV" 3
