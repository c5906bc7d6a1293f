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
python3 - "$CSV" <<'PY'
import csv, re, sys
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "nsecond")
    v = float(r["Metric Value"].replace(",", ""))
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    name = r["Kernel Name"]
    name = re.sub(r"\(.*", "", name)           # drop argument lists
    name = re.sub(r"<.*", "", name) if len(name) > 90 else name
    rows.append((name, v * scale))
steps = 2
agg = {}
for n, ms in rows:
    c, t = agg.get(n, (0, 0.0))
    agg[n] = (c + 1, t + ms)
total = sum(t for _, t in agg.values()) / steps
print(f"{'kernel':70} {'calls':>6} {'ms/step':>9} {'share':>6}")
for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
    print(f"{n[:70]:70} {c / steps:6.0f} {t / steps:9.3f} {100 * t / steps / total:5.1f}%")
print(f"{'total':70} {sum(c for c, _ in agg.values()) / steps:6.0f} {total:9.3f}")
PY
