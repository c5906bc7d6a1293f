#!/usr/bin/env bash
# On a CUDA machine: why kernels wait. Runs a command under Nsight Compute for the kernels whose names match
# REGEX (skipping the first SKIP matches, e.g. a warm-up iteration) and prints per kernel: duration, occupancy,
# registers, shared memory, DRAM / L2 / SM throughput and the warp stall reasons (cycles per issued
# instruction by reason), largest first.
#   scripts/ncu_stalls.sh REGEX SKIP COUNT COMMAND...
set -euo pipefail
RE=${1:?kernel name regex}
SKIP=${2:?launches to skip}
COUNT=${3:?launches to profile}
shift 3
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
M+=,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
M+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
M+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M+=,smsp__average_warp_latency_per_inst_issued.ratio
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle wait not_selected \
  selected dispatch_stall no_instruction drain imc_miss branch_resolving membar sleeping tex_throttle misc; do
  M+=,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
"$NCU" --csv --metrics "$M" -k "regex:$RE" --launch-skip "$SKIP" --launch-count "$COUNT" "$@" \
  >"$OUT/ncu_stalls.csv" 2>"$OUT/ncu_stalls.err" || { tail -20 "$OUT/ncu_stalls.err"; exit 1; }
python3 - "$OUT/ncu_stalls.csv" <<'PY'
import csv, re, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
by = {}
for r in csv.DictReader(lines):
    key = (r["ID"], re.sub(r"\(.*", "", r["Kernel Name"])[:60])
    by.setdefault(key, {})[r["Metric Name"]] = (r["Metric Value"], r.get("Metric Unit", ""))
for (i, name), m in by.items():
    g = lambda k: m.get(k, ("?", ""))[0]
    print(f"== {name} (#{i}): {g('gpu__time_duration.sum')} {m.get('gpu__time_duration.sum', ('', ''))[1]}, "
          f"regs {g('launch__registers_per_thread')}, smem {g('launch__shared_mem_per_block_dynamic')}, "
          f"occupancy {g('sm__warps_active.avg.pct_of_peak_sustained_active')}% "
          f"(limit regs {g('launch__occupancy_limit_registers')}, smem {g('launch__occupancy_limit_shared_mem')} blocks)")
    print(f"   DRAM {g('dram__throughput.avg.pct_of_peak_sustained_elapsed')}%  L2 "
          f"{g('lts__throughput.avg.pct_of_peak_sustained_elapsed')}%  SM {g('sm__throughput.avg.pct_of_peak_sustained_elapsed')}%"
          f"  tensor {g('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active')}%  "
          f"cycles/issue {g('smsp__average_warp_latency_per_inst_issued.ratio')}")
    st = []
    for k, (v, _) in m.items():
        mm = re.match(r"smsp__average_warps_issue_stalled_(.*)_per_issue_active.ratio", k)
        if mm:
            try:
                st.append((float(v.replace(",", "")), mm.group(1)))
            except ValueError:
                pass
    print("   stalls: " + ", ".join(f"{n} {v:.2f}" for v, n in sorted(st, reverse=True)[:7]))
PY
