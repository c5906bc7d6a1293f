#!/usr/bin/env bash
# Our GDN core vs flash-linear-attention on the same GPU: prints a table with the ratios and the JSON lines.
# Ours runs three times: recomputing the forward's chunk quantities in the backward, keeping them all
# (--keep all), and keeping only the chunk-start states (--keep states).
# MiB columns: the allocator's peak above the inputs, and "kept": what the forward leaves allocated for the
# backward (besides inputs and output). TFLOP/s: ours, forward + backward (bench_gdn's FLOP convention).
#   bench/gdn/run_gdn.sh BENCH_GDN_BIN WHEEL_DIR   (WHEEL_DIR: flash-linear-attention, fla-core, einops wheels)
# Env TOKENS (4096,8192,16384,32768), SEQ (4096). GPU_TIME=1 also compares GPU kernel time per fwd+bwd (ours in
# states mode under Nsight Compute, FLA under torch.profiler): the wall-clock ratio includes FLA's host cost
# (~3.4 ms per fwd+bwd on an H100 machine, measured at 64 tokens), the GPU-time ratio does not.
set -u
BIN=${1:?bench_gdn binary}
WHL=${2:?wheel dir}
TOKENS=${TOKENS:-4096,8192,16384,32768}
SEQ=${SEQ:-4096}
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=${OUT:-/tmp}/gdn.jsonl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fla_site "$WHL"/*.whl
"$BIN" --tokens "$TOKENS" --seq "$SEQ" | tee /dev/stderr | grep '^{' > "$LOG"
"$BIN" --tokens "$TOKENS" --seq "$SEQ" --keep all | tee /dev/stderr | grep '^{' >> "$LOG"
"$BIN" --tokens "$TOKENS" --seq "$SEQ" --keep states | tee /dev/stderr | grep '^{' >> "$LOG"
PYTHONPATH=/tmp/fla_site PYTHONUNBUFFERED=1 python3 "$HERE/fla_gdn.py" --tokens "$TOKENS" --seq "$SEQ" \
  2> >(tail -5 >&2) | grep '^{' >> "$LOG"
python3 - "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["tokens"], {})[r["impl"]] = r
print(f"{'tokens':>7} {'ours':>9} {'ours fwd':>9} {'FLA fwd':>9} {'x':>6} {'ours f+b':>9} {'FLA f+b':>9} {'x':>6} "
      f"{'TFLOP/s':>8} {'ours MiB':>9} {'FLA MiB':>9} {'ours kept':>9} {'FLA kept':>9}")
for t, d in sorted(by.items()):
    f = d.get("fla")
    for mode, name in (("deltatune", "recompute"), ("deltatune_keep", "keep all"), ("deltatune_states", "states")):
        o = d.get(mode)
        if not (o and f):
            continue
        print(f"{t:7d} {name:>9} {o['fwd_ms']:9.2f} {f['fwd_ms']:9.2f} {f['fwd_ms'] / o['fwd_ms']:6.2f} "
              f"{o['fwd_bwd_ms']:9.2f} {f['fwd_bwd_ms']:9.2f} {f['fwd_bwd_ms'] / o['fwd_bwd_ms']:6.2f} "
              f"{o.get('fwd_bwd_tflops', -1):8.1f} "
              f"{o['peak_mib']:9.0f} {f['peak_mib']:9.0f} {o.get('saved_mib', -1):9.0f} {f.get('saved_mib', -1):9.0f}")
print(json.dumps({"bench": "gdn_summary", "rows": rows}))
PY
if [ "${GPU_TIME:-0}" = 1 ]; then
  echo "GPU kernel time per fwd+bwd: ours (states, ncu) vs FLA (torch.profiler)"
  for T in ${TOKENS//,/ }; do
    ours=$(OUT=${OUT:-/tmp} bash "$HERE/../../scripts/profile_gdn.sh" "$BIN" --tokens "$T" --seq "$SEQ" --keep states |
      awk '$1 == "total" {print $3}')
    fla=$(PYTHONPATH=/tmp/fla_site python3 "$HERE/fla_gdn.py" --tokens "$T" --seq "$SEQ" --iters 1 --profile 2>/dev/null |
      awk '/GPU kernel sum/ {print $(NF-1)}')
    python3 -c "import sys; o, f = float(sys.argv[2]), float(sys.argv[3]); print(f'{int(sys.argv[1]):7d}  ours {o:.3f} ms  FLA {f:.3f} ms  x {f / o:.2f}')" \
      "$T" "${ours:-nan}" "${fla:-nan}"
  done
fi
