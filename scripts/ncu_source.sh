#!/usr/bin/env bash
# On a CUDA machine: where one GDN kernel stalls, per SASS instruction. Profiles the first launch of the kernels
# matching KERNEL_REGEX in an 8K-token bench_gdn run (states mode) under Nsight Compute (warp state, source
# counters, speed of light) and writes $OUT/NAME_src.csv (per instruction: stall samples by reason, executed
# instructions, L2 sectors, shared wavefronts) and $OUT/NAME_details.txt.
#   scripts/ncu_source.sh BENCH_GDN_BIN KERNEL_REGEX NAME [bench_gdn args...]
set -euo pipefail
BIN=${1:?bench_gdn binary}
RE=${2:?kernel name regex}
NAME=${3:?output name}
shift 3
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--tokens 8192 --keep states)
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
"$NCU" --section WarpStateStats --section SourceCounters --section SpeedOfLight -k "regex:$RE" -c 1 \
  -o "$OUT/$NAME" "$BIN" "${ARGS[@]}" --iters 1 >"$OUT/$NAME.log" 2>&1
"$NCU" -i "$OUT/$NAME.ncu-rep" --page source --print-source sass --csv >"$OUT/${NAME}_src.csv"
"$NCU" -i "$OUT/$NAME.ncu-rep" --page details >"$OUT/${NAME}_details.txt"
rm -f "$OUT/$NAME.ncu-rep"
