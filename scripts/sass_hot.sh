#!/usr/bin/env bash
# On a CUDA machine: where one kernel launch's warps wait, by SASS instruction. Runs a command under Nsight
# Compute for the first launch of a kernel matching REGEX after SKIP matching launches (warp-state sampling),
# prints the 45 most-sampled instructions and, split at each block barrier (BAR.SYNC), the share of samples,
# executed instructions and the top stall reasons of each phase of the kernel. Report and CSV stay in $OUT.
#   scripts/sass_hot.sh REGEX SKIP COMMAND...
set -euo pipefail
RE=${1:?kernel name regex}
SKIP=${2:?launches to skip}
shift 2
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
"$NCU" --section WarpStateStats --section SourceCounters -k "regex:$RE" --launch-skip "$SKIP" --launch-count 1 \
  -o "$OUT/hot" -f "$@" >"$OUT/hot.log" 2>&1 || { tail -20 "$OUT/hot.log"; exit 1; }
"$NCU" -i "$OUT/hot.ncu-rep" --page source --csv --print-source sass >"$OUT/hot_sass.csv" 2>"$OUT/hot_sass.err"
python3 - "$OUT/hot_sass.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if "Address" in r)
h, data = rows[hi], rows[hi + 1:]
col = h.index
A, S = col("Address"), col("Source")
W, E = col("Warp Stall Sampling (All Samples)"), col("Instructions Executed")
reasons = [x for x in h if x.startswith("stall_") and "Not Issued" not in x]
num = lambda r, i: float(r[i] or 0)
total = sum(num(r, W) for r in data)
print(f"samples {total:.0f}, SASS instructions {len(data)}")
for r in sorted(data, key=lambda r: -num(r, W))[:45]:
    print(f"{num(r, W):8.0f} {100 * num(r, W) / total:5.1f}%  {r[A]}  {r[S][:90]}")
phases, cur = [], []
for r in data:
    cur.append(r)
    if "BAR.SYNC" in r[S]:
        phases.append(cur)
        cur = []
phases.append(cur)
print("phase  SASS  hmma  samples  executed    top stalls (% of all samples)")
for i, ph in enumerate(phases):
    top = sorted(((x, sum(num(r, col(x)) for r in ph)) for x in reasons), key=lambda kv: -kv[1])[:4]
    print(f"{i:5d} {len(ph):5d} {sum('HMMA' in r[S] for r in ph):5d} {100 * sum(num(r, W) for r in ph) / total:7.1f}% "
          f"{sum(num(r, E) for r in ph):10.0f}  " + " ".join(f"{k[6:]}={100 * v / total:.1f}" for k, v in top))
PY
